// cuda::upload on a GPU: device bytes copied back equal the CPU tensors bit for bit (every
// dtype, views and shared storages, neg/conj views, big-endian files, all three load modes),
// with rings smaller than one tensor, name filters, F16/BF16 -> F32 conversion, the mapped
// file's pages released, and host memory bounded while a large file uploads.
#include <ptread/cuda/upload.cuh>

#include <catch2/catch.hpp>

#include "support/cases.hpp"
#include "support/device.hpp"

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace ptread_test;
namespace pc = ptread::cuda;

std::vector<uint8_t> values_of(const ptread::Tensor& t, ptread::DType as) {
  std::vector<uint8_t> v(static_cast<size_t>(t.numel()) * ptread::dtype_size(as));
  REQUIRE(t.copy_to(v.data(), v.size(), as).ok());
  return v;
}

// Every tensor of ck against its upload: metadata, values (bit for bit, converted where asked),
// and storage sharing both ways.
void check_upload(const ptread::Checkpoint& ck, const pc::DeviceTensors& dev, bool converted) {
  REQUIRE(dev.tensors().size() == ck.tensors().size());
  std::map<const ptread::Storage*, void*> device_of;
  std::map<void*, const ptread::Storage*> host_of;
  for (size_t i = 0; i < ck.tensors().size(); ++i) {
    const ptread::NamedTensor& nt = ck.tensors()[i];
    const pc::NamedDeviceTensor& d = dev.tensors()[i];
    INFO(nt.name);
    REQUIRE(d.name == nt.name);
    CHECK(dev.find(nt.name) != nullptr);
    const bool widened = converted && (nt.tensor.dtype() == ptread::DType::F16 || nt.tensor.dtype() == ptread::DType::BF16);
    CHECK(d.tensor.stored_dtype() == nt.tensor.dtype());
    CHECK(d.tensor.dtype() == (widened ? ptread::DType::F32 : nt.tensor.dtype()));
    CHECK(d.tensor.shape() == nt.tensor.shape());
    CHECK(d.tensor.device() == nt.tensor.device());
    if (!nt.tensor.is_neg() && !nt.tensor.is_conj()) CHECK(d.tensor.strides() == nt.tensor.strides());
    if (nt.tensor.numel() == 0) {
      CHECK(d.tensor.data() == nullptr);
      continue;
    }
    auto back = pc::to_host(d.tensor);
    REQUIRE(back.ok());
    CHECK(values_of(*back, d.tensor.dtype()) == values_of(nt.tensor, d.tensor.dtype()));
    if (nt.tensor.is_neg() || nt.tensor.is_conj()) continue;  // uploaded as a resolved copy of its own
    const ptread::Storage* hs = nt.tensor.storage().get();
    void* ds = d.tensor.storage_data();
    auto a = device_of.emplace(hs, ds);
    auto b = host_of.emplace(ds, hs);
    CHECK(a.first->second == ds);  // one storage, one device span
    CHECK(b.first->second == hs);  // and never two storages in one span
  }
}

std::string temp_path(const char* name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/ptread_cuda_" + std::to_string(::getpid()) + "_" + name;
}

// "RssAnon:" etc. from /proc/self/status, in bytes.
uint64_t status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string k;
  uint64_t v = 0;
  while (f >> k) {
    if (k == key) {
      f >> v;
      return v * 1024;
    }
    std::getline(f, k);
  }
  return 0;
}

}  // namespace

TEST_CASE("upload: fixtures come back bit for bit, in every load mode, through a tiny ring", "[cuda][upload]") {
  pc::UploadOptions small;
  small.buffer_bytes = 4096;  // smaller than many tensors: they cross buffers
  small.buffers = 2;
  for (const char* file : {"dtypes.pt", "views.pt", "be_zip.pt", "legacy_views.pt", "params.pt", "cuda.pt",
                           "ts_trace.pt", "many.pt", "nn/nn.pt"}) {
    for (ptread::LoadMode mode : {ptread::LoadMode::mmap, ptread::LoadMode::read, ptread::LoadMode::memory}) {
      INFO(file << " " << ptread::load_mode_name(mode));
      std::vector<unsigned char> keep;
      auto ck = open_in_mode(fixture_dir() + "/" + file, mode, &keep);
      REQUIRE(ck.ok());
      for (const pc::UploadOptions& o : {small, pc::UploadOptions()}) {
        auto dev = pc::upload(*ck, o);
        REQUIRE(dev.ok());
        check_upload(*ck, *dev, false);
        CHECK(dev->stats().host_bytes <= dev->stats().device_bytes);
      }
    }
  }
}

TEST_CASE("upload: a tensor much larger than the ring, and storages shared by views", "[cuda][upload]") {
  StateDict sd;
  sd.add("big", ptread::DType::F32, {1000, 300}, test_values(300000, 7));  // 1.2 MB
  std::vector<uint8_t> raw(64 * 2);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>(i * 7 + 1);
  sd.storage("shared", ptread::DType::BF16, raw);
  sd.view("whole", "shared", {64}, {1});
  sd.view("t", "shared", {8, 8}, {1, 8});
  sd.view("tail", "shared", {10}, {2}, 40);
  const auto file = sd.build();
  auto ck = ptread::Checkpoint::open_memory(file.data(), file.size());
  REQUIRE(ck.ok());
  pc::UploadOptions o;
  o.buffer_bytes = 4096;
  o.buffers = 3;
  auto dev = pc::upload(*ck, o);
  REQUIRE(dev.ok());
  check_upload(*ck, *dev, false);
  CHECK(dev->stats().transfers >= 1200000 / 4096);
  CHECK(dev->find("t")->storage_data() == dev->find("whole")->storage_data());
  CHECK(dev->find("tail")->storage_offset() == 40);

  SECTION("only the span of a storage the chosen views reach is uploaded") {
    auto part = pc::upload(*ck, [] {
      pc::UploadOptions p;
      p.names = {"tail", "tail"};  // named twice: uploaded once
      return p;
    }());
    REQUIRE(part.ok());
    REQUIRE(part->tensors().size() == 1);
    const pc::DeviceTensor& t = part->tensors()[0].tensor;
    CHECK(t.storage_bytes() == 19 * 2);  // elements 40 .. 58
    CHECK(t.storage_offset() == 0);
    auto back = pc::to_host(t);
    REQUIRE(back.ok());
    CHECK(values_of(*back, ptread::DType::BF16) == values_of(*ck->find("tail"), ptread::DType::BF16));
  }
  SECTION("a name the checkpoint lacks is not_found") {
    pc::UploadOptions p;
    p.names = {"big", "nope"};
    auto r = pc::upload(*ck, p);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == ptread::ErrorCode::not_found);
    CHECK(r.error().str().find("'nope'") != std::string::npos);
  }
}

TEST_CASE("upload: F16 and BF16 become F32 on the device when asked, exactly", "[cuda][upload]") {
  pc::UploadOptions o;
  o.convert_to_f32 = true;
  o.buffer_bytes = 1024;  // conversions cross chunk boundaries
  for (const char* file : {"nn/nn.pt", "dtypes.pt", "legacy_views.pt"}) {
    INFO(file);
    auto ck = ptread::Checkpoint::open(fixture_dir() + "/" + file);
    REQUIRE(ck.ok());
    auto dev = pc::upload(*ck, o);
    REQUIRE(dev.ok());
    check_upload(*ck, *dev, true);  // compares with copy_to(F32): torch's widening
  }
  StateDict sd;
  std::vector<uint8_t> raw(3000 * 2);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>(i * 13 + 5);
  sd.storage("h", ptread::DType::F16, raw);
  sd.view("a", "h", {1000}, {1}, 7);
  sd.view("b", "h", {50, 20}, {20, 1}, 1500);
  sd.storage("bf", ptread::DType::BF16, raw);
  sd.view("c", "bf", {3000}, {1});
  const auto file = sd.build();
  auto ck = ptread::Checkpoint::open_memory(file.data(), file.size());
  REQUIRE(ck.ok());
  auto dev = pc::upload(*ck, o);
  REQUIRE(dev.ok());
  check_upload(*ck, *dev, true);
  CHECK(dev->find("a")->storage_data() == dev->find("b")->storage_data());
  CHECK(dev->find("b")->storage_offset() == 1500 - 7);
}

TEST_CASE("upload: mmap mode reads the file with pread, or copies from the mapping and releases its pages", "[cuda][upload]") {
  StateDict sd;
  for (int k = 0; k < 8; ++k) sd.add("w" + std::to_string(k), ptread::DType::F32, {256, 1024}, test_values(262144, 20u + static_cast<uint32_t>(k)));
  const auto bytes = sd.build();
  const std::string path = temp_path("release.pt");
  REQUIRE(write_file(path, bytes.data(), bytes.size()));
  {
    auto ck = ptread::Checkpoint::open(path);
    REQUIRE(ck.ok());
    pc::UploadOptions o;
    o.buffer_bytes = size_t{1} << 20;
    auto dev = pc::upload(*ck, o);  // read_file: every byte read with pread, nothing mapped
    REQUIRE(dev.ok());
    CHECK(dev->stats().file_bytes == dev->stats().host_bytes);
    CHECK(dev->stats().host_bytes == 8 * 1024 * 1024);
    CHECK(dev->stats().released_bytes == 0);
    check_upload(*ck, *dev, false);

    o.read_file = false;  // copied from the mapping, its pages dropped once copied
    auto devm = pc::upload(*ck, o);
    REQUIRE(devm.ok());
    CHECK(devm->stats().file_bytes == 0);
    CHECK(devm->stats().released_bytes >= 8 * 1024 * 1024);  // every tensor byte, pages rounded out
    check_upload(*ck, *devm, false);                          // the CPU side reads them back in

    // Another file renamed over the path (the checkpoint saved again): not read; the
    // upload is the mapped file's, copied from the mapping.
    StateDict other;
    for (int k = 0; k < 8; ++k) other.add("w" + std::to_string(k), ptread::DType::F32, {256, 1024}, test_values(262144, 90u));
    const auto other_bytes = other.build();
    const std::string next = temp_path("release_next.pt");
    REQUIRE(write_file(next, other_bytes.data(), other_bytes.size()));
    REQUIRE(std::rename(next.c_str(), path.c_str()) == 0);
    o.read_file = true;
    auto devn = pc::upload(*ck, o);
    REQUIRE(devn.ok());
    CHECK(devn->stats().file_bytes == 0);
    check_upload(*ck, *devn, false);

    ptread::Options read;
    read.mode = ptread::LoadMode::read;
    auto ckr = ptread::Checkpoint::open(path, read);
    REQUIRE(ckr.ok());
    auto devr = pc::upload(*ckr, o);
    REQUIRE(devr.ok());
    CHECK(devr->stats().released_bytes == 0);  // owned buffers are never touched
    CHECK(devr->stats().file_bytes == 0);      // nor the file read again
  }
  std::remove(path.c_str());
}

TEST_CASE("upload: host memory grows by about the ring, whatever the checkpoint's size", "[cuda][upload]") {
  if (PTREAD_CUDA_EMULATE) {
    WARN("emulated device memory is host memory: the bound is measured on a GPU only");
    return;
  }
  const std::string path = temp_path("rss.pt");
  {
    StateDict sd;
    const auto v = test_values(size_t{1} << 20, 3);
    for (int k = 0; k < 48; ++k) sd.add("w" + std::to_string(k), ptread::DType::F32, {1024, 1024}, v);  // 192 MiB
    const auto bytes = sd.build();
    REQUIRE(write_file(path, bytes.data(), bytes.size()));
  }
  auto ck = ptread::Checkpoint::open(path);
  REQUIRE(ck.ok());
  for (bool read_file : {true, false}) {  // pread, or copies from the mapping whose pages are dropped
    INFO("read_file " << read_file);
    pc::UploadOptions o;
    o.buffer_bytes = size_t{4} << 20;
    o.buffers = 2;
    o.read_file = read_file;
    auto up = pc::Uploader::create(o);  // the ring and the CUDA context exist before the measure
    REQUIRE(up.ok());
    {
      std::ofstream reset("/proc/self/clear_refs");
      reset << "5";  // VmHWM := VmRSS
    }
    const uint64_t before = status_bytes("VmRSS:");
    auto dev = up->upload(*ck);
    REQUIRE(dev.ok());
    const uint64_t peak = status_bytes("VmHWM:");
    INFO("RSS before " << before << ", peak " << peak << " (RssFile " << status_bytes("RssFile:") << ")");
    CHECK(peak - before <= (size_t{32} << 20) + 2 * o.buffer_bytes);
  }
  std::remove(path.c_str());
}

TEST_CASE("upload: the fixtures torch 2.x saved from CUDA tensors, when tests/fixtures/cuda exists", "[cuda][upload]") {
  const std::string dir = fixture_dir() + "/cuda";
  if (!path_exists(dir + "/expected.json")) {
    std::printf("note: %s is absent (gen_cuda.py writes it on a GPU machine): not uploaded\n", dir.c_str());
    WARN(dir << " is absent: the CUDA-saved fixtures were not uploaded");
    return;
  }
  for (const char* file : {"cuda_sd.pt", "cuda_traced.pt", "cuda_fp8.pt"}) {
    INFO(file);
    auto ck = ptread::Checkpoint::open(dir + "/" + file);
    REQUIRE(ck.ok());
    auto dev = pc::upload(*ck);
    REQUIRE(dev.ok());
    check_upload(*ck, *dev, false);
  }
}
