// Checkpoints written by real torch (tests/fixtures/generate.py) read as torch.load reads
// them (torch.jit.load for TorchScript): format, archive prefix, names in file order,
// dtypes, shapes, strides, offsets, devices, requires_grad, bit-identical values, storage
// sharing, entries that cannot be read, and metadata in the object tree. Zip, legacy and
// TorchScript files, whole models, big-endian files. With PTREAD_FIXTURES set, the same
// checks run on freshly generated files.
#include <catch2/catch.hpp>

#include <cmath>

#include "support/helpers.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

using namespace ptread_test;

namespace {

const Json& expected() { return expected_json(); }

ptread::Value follow(ptread::Value v, const Json& path) {
  for (size_t k = 0; k < path.size(); ++k) {
    const Json& p = path[k];
    if (p.is_string()) {
      v = v[std::string_view(p.as_string())];
    } else if (p.is_object()) {
      v = v.at_int_key(p["int_key"].as_int());
    } else {
      v = v[static_cast<size_t>(p.as_int())];
    }
  }
  return v;
}

std::string to_hex(std::string_view s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (char c : s) {
    out.push_back(d[(static_cast<unsigned char>(c) >> 4) & 0xf]);
    out.push_back(d[static_cast<unsigned char>(c) & 0xf]);
  }
  return out;
}

// ["args", 0, {"int_key": 3}] -> args[0][3]
std::string path_str(const Json& path) {
  std::string out;
  for (size_t k = 0; k < path.size(); ++k) {
    const Json& p = path[k];
    if (p.is_string()) {
      out += "[\"" + p.as_string() + "\"]";
    } else if (p.is_object()) {
      out += "[" + std::to_string(p["int_key"].as_int()) + "]";
    } else {
      out += "[" + std::to_string(p.as_int()) + "]";
    }
  }
  return out;
}

// A typed accessor's result, CHECKed with its error, so that one scalar that cannot be
// read does not hide the checks of the others.
template <class T>
bool got_value(const ptread::Result<T>& r) {
  INFO((r.ok() ? std::string() : r.error().str()));
  CHECK(r.ok());
  return r.ok();
}

void check_file(const std::string& dir, const std::string& file, const Json& exp, ptread::LoadMode mode) {
  std::vector<unsigned char> keep;
  auto ck = open_in_mode(dir + "/" + file, mode, &keep);
  INFO("file " << file << ", mode " << ptread::load_mode_name(mode));
  INFO((ck.ok() ? std::string() : ck.error().str()));
  REQUIRE(ck.ok());
  CHECK(std::string(ck->format_name()) == exp["format"].as_string());
  if (exp["archive_prefix"].is_null()) {
    CHECK(ck->archive_prefix().empty());  // legacy files: no archive
  } else {
    CHECK(ck->archive_prefix() == exp["archive_prefix"].as_string() + "/");
  }
  // Tensor-like entries listed but not handed out (torch 2.x's nested tensors).
  std::vector<std::string> unsupported, want_unsupported;
  for (const auto& u : ck->unsupported()) unsupported.push_back(u.name);
  for (size_t k = 0; k < exp["unsupported"].size(); ++k) want_unsupported.push_back(exp["unsupported"][k].as_string());
  CHECK(unsupported == want_unsupported);
  // exp["quantized"] and exp["sparse"]: checked in tests/unit/quantized.cpp

  const Json& tensors = exp["tensors"];
  // The listing without Tensor objects (tensor_info), against torch, before tensors() has
  // made any: every field as torch reports it. (Aligned by name as below when a TorchScript
  // archive without zlib lists attributes too.)
  {
    size_t next = 0;
    for (size_t i = 0; i < ck->tensor_count() && next < tensors.size(); ++i) {
      const ptread::TensorInfo info = ck->tensor_info(i);
      const Json& e = tensors[next];
      if (PTREAD_WITH_ZLIB == 0 && exp["format"].as_string() == "torchscript" && info.name != e["name"].as_string()) {
        continue;
      }
      INFO("tensor_info(" << i << ") '" << e["name"].as_string() << "'");
      CHECK(info.name == e["name"].as_string());
      CHECK(std::string(ptread::dtype_name(info.dtype)) == e["dtype"].as_string());
      CHECK(shape_str(info.shape) == shape_str(e["shape"]));
      CHECK(shape_str(info.strides) == shape_str(e["strides"]));
      CHECK(info.storage_offset == e["storage_offset"].as_int());
      CHECK(info.device == e["device"].as_string());
      CHECK(info.requires_grad == e["requires_grad"].as_bool());
      uint64_t numel = 1;
      for (size_t d = 0; d < e["shape"].size(); ++d) numel *= static_cast<uint64_t>(e["shape"][d].as_int());
      CHECK(info.nbytes == numel * ptread::dtype_size(info.dtype));
      ++next;
    }
    CHECK(next == tensors.size());
  }
  // get(name) before the list exists: each tensor (the first of its name) as torch has it,
  // then the same Storage as find() gives; a missing name is not_found.
  {
    std::map<std::string, size_t> first;
    for (size_t k = 0; k < tensors.size(); ++k) first.emplace(tensors[k]["name"].as_string(), k);
    std::vector<std::pair<std::string, ptread::Tensor>> got;
    for (const auto& f : first) {
      auto t = ck->get(f.first);
      INFO("get('" << f.first << "')");
      REQUIRE(t.ok());
      const Json& e = tensors[f.second];
      CHECK(std::string(ptread::dtype_name(t->dtype())) == e["dtype"].as_string());
      CHECK(shape_str(t->shape()) == shape_str(e["shape"]));
      CHECK(tensor_sha256(*t) == e["sha256"].as_string());
      got.emplace_back(f.first, *t);
    }
    for (const auto& g : got) {
      const ptread::Tensor* t = ck->find(g.first);
      REQUIRE(t != nullptr);
      CHECK(t->storage() == g.second.storage());
    }
    auto missing = ck->get("no such tensor");
    REQUIRE(!missing.ok());
    CHECK(missing.error().code() == ptread::ErrorCode::not_found);
  }
  // The listed tensors, in order. Without zlib a TorchScript archive's code/ (deflated by
  // torch) cannot be read, so which attributes are parameters and buffers is unknown and
  // plain tensor attributes are listed too (docs/formats.md): there the state_dict()
  // tensors must appear in order among them, and the extras are reported.
  std::vector<const ptread::NamedTensor*> listed;
  {
    std::vector<std::string> names, want_names;
    for (size_t k = 0; k < tensors.size(); ++k) want_names.push_back(tensors[k]["name"].as_string());
    const bool attribute_names = PTREAD_WITH_ZLIB == 0 && exp["format"].as_string() == "torchscript";
    size_t next = 0;
    for (const auto& nt : ck->tensors()) {
      if (attribute_names && (next == want_names.size() || nt.name != want_names[next])) {
        WARN(file << ": without zlib, TorchScript attribute '" << nt.name << "' is listed too");
        continue;
      }
      names.push_back(nt.name);
      listed.push_back(&nt);
      ++next;
    }
    CHECK(names == want_names);  // the whole list in a failure message
    REQUIRE(names.size() == want_names.size());
  }
  // tensor_info(i) is entry i of tensors(), field for field (conj/neg bits too).
  REQUIRE(ck->tensor_count() == ck->tensors().size());
  for (size_t i = 0; i < ck->tensor_count(); ++i) {
    const ptread::TensorInfo info = ck->tensor_info(i);
    const ptread::NamedTensor& nt = ck->tensors()[i];
    INFO("entry " << i << " '" << nt.name << "'");
    CHECK(info.name == nt.name);
    CHECK(info.dtype == nt.tensor.dtype());
    CHECK(info.shape == nt.tensor.shape());
    CHECK(info.strides == nt.tensor.strides());
    CHECK(info.storage_offset == nt.tensor.storage_offset());
    CHECK(info.device == nt.tensor.device());
    CHECK(info.nbytes == nt.tensor.nbytes());
    CHECK(info.requires_grad == nt.tensor.requires_grad());
    CHECK(info.conj == nt.tensor.is_conj());
    CHECK(info.neg == nt.tensor.is_neg());
  }
  std::map<int64_t, const ptread::Storage*> groups;
  std::map<const ptread::Storage*, int64_t> group_of;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Json& e = tensors[k];
    const auto& nt = *listed[k];
    INFO("tensor " << k << " '" << e["name"].as_string() << "'");
    check_tensor_entry(nt, e);
    CHECK(shape_str(nt.tensor.strides()) == shape_str(e["strides"]));
    CHECK(nt.tensor.storage_offset() == e["storage_offset"].as_int());
    CHECK(nt.tensor.device() == e["device"].as_string());
    CHECK(nt.tensor.requires_grad() == e["requires_grad"].as_bool());
    // torch's own dtype conversions of the same values (t.float(), t.half() ...).
    for (const auto& conv : e["converted"].as_object()) {
      ptread::DType to = ptread::DType::U8;
      REQUIRE(ptread::dtype_from_name(conv.first, &to));
      std::vector<unsigned char> buf(static_cast<size_t>(nt.tensor.numel()) * ptread::dtype_size(to));
      auto st = nt.tensor.copy_to(buf.data(), buf.size(), to);
      INFO("converted to " << conv.first);
      REQUIRE(st.ok());
      CHECK(sha256_hex(buf.data(), buf.size()) == conv.second.as_string());
    }
    // Same storage group in torch <=> same Storage object here.
    const int64_t g = e["storage_group"].as_int();
    const ptread::Storage* s = nt.tensor.storage().get();
    auto gi = groups.emplace(g, s);
    CHECK(gi.first->second == s);
    auto si = group_of.emplace(s, g);
    CHECK(si.first->second == g);
    // find() gives the first tensor listed under a name.
    const ptread::Tensor* found = ck->find(nt.name);
    REQUIRE(found != nullptr);
  }

  const Json& scalars = exp["scalars"];
  for (size_t k = 0; k < scalars.size(); ++k) {
    const Json& s = scalars[k];
    ptread::Value v = follow(ck->root(), s["path"]);
    const std::string& type = s["type"].as_string();
    // numpy scalars ("numpy": "float32" ...) are plain ints, floats and bools once loaded.
    INFO("scalar " << k << " root" << path_str(s["path"]) << " of type " << type << ", found " << v.repr());
    if (type == "int") {
      auto r = v.as_int();
      if (got_value(r)) CHECK(*r == s["value"].as_int());
    } else if (type == "int_big") {
      CHECK(v.is_int());
      CHECK(v.big_int_decimal() == s["value"].as_string());
    } else if (type == "float") {
      auto r = v.as_float();
      if (got_value(r)) CHECK(*r == s["value"].as_double());
    } else if (type == "str") {
      auto r = v.as_string();
      if (got_value(r)) CHECK(std::string(*r) == s["value"].as_string());
    } else if (type == "bool") {
      auto r = v.as_bool();
      if (got_value(r)) CHECK(*r == s["value"].as_bool());
    } else if (type == "none") {
      CHECK(v.is_none());
    } else if (type == "bytes") {
      auto r = v.as_bytes();
      if (got_value(r)) CHECK(to_hex(*r) == s["hex"].as_string());
    } else if (type == "device") {
      // torch.device pickles as torch.device(type) or torch.device(type, index).
      CHECK(v.class_name() == "torch.device");
      auto t = v.args()[0].as_string();
      if (got_value(t)) CHECK(std::string(*t) == s["value"]["type"].as_string());
      const Json& index = s["value"]["index"];
      if (index.is_null()) {
        CHECK((v.args().size() == 1 || v.args()[1].is_none()));
      } else {
        auto i = v.args()[1].as_int();
        if (got_value(i)) CHECK(*i == index.as_int());
      }
    } else if (type == "dtype") {
      // A dtype is the global itself ("torch.float16").
      CHECK(v.kind() == ptread::ValueKind::global);
      CHECK(v.class_name() == s["value"].as_string());
    } else if (type == "set" || type == "frozenset") {
      CHECK(v.kind() == (type == "set" ? ptread::ValueKind::set : ptread::ValueKind::frozenset));
      // Unordered: compare sorted "i:<int>" / "s:<str>" spellings.
      std::vector<std::string> got, want;
      for (size_t i = 0; i < v.size(); ++i) {
        const ptread::Value item = v[i];
        if (item.is_string()) {
          got.push_back("s:" + std::string(*item.as_string()));
        } else if (item.is_int()) {
          got.push_back("i:" + item.big_int_decimal());
        } else {
          got.push_back("?:" + item.repr());
        }
      }
      const Json& items = s["items"];
      for (size_t i = 0; i < items.size(); ++i) {
        want.push_back(items[i].is_string() ? "s:" + items[i].as_string() : "i:" + std::to_string(items[i].as_int()));
      }
      std::sort(got.begin(), got.end());
      std::sort(want.begin(), want.end());
      CHECK(got == want);
    } else if (type == "storage") {
      // A storage saved on its own: a 1-D tensor of its dtype over all of it, aligned.
      CHECK(v.is_storage());
      auto r = v.as_storage();
      if (got_value(r)) {
        CHECK(ptread::dtype_name(r->dtype()) == s["dtype"].as_string());
        CHECK(r->numel() == s["size"].as_int());
        CHECK(tensor_sha256(*r) == s["sha256"].as_string());
        CHECK(reinterpret_cast<uintptr_t>(r->data_ptr()) % std::min<size_t>(r->element_size(), 8) == 0);
      }
    } else if (type == "dict") {
      // dict and its subclasses (OrderedDict, Counter, defaultdict); "class" is not
      // checked: a C++ Value has no class for dicts.
      CHECK(v.is_dict());
      CHECK(v.size() == static_cast<size_t>(s["len"].as_int()));
    } else if (type == "list" || type == "tuple" || type == "Size") {
      // torch.Size, a tuple subclass, is a tuple here (torch.Size((2, 3)) pickles as its items).
      CHECK((type == "list" ? v.is_list() : v.is_tuple()));
      CHECK(v.size() == static_cast<size_t>(s["len"].as_int()));
    } else if (type == "object") {
      CHECK(v.is_object());
      CHECK(v.class_name() == s["class"].as_string());
    } else {
      FAIL("unknown scalar type " << type);
    }
  }
}

}  // namespace

TEST_CASE("torch-written fixtures read as torch.load reads them", "[fixtures]") {
  const Json& files = expected()["files"];
  REQUIRE(files.size() >= 30);
  for (const auto& kv : files.as_object()) {
#if PTREAD_WITH_ZLIB == 0
    if (kv.first == "deflate.pt") continue;  // covered by the zlib-less error test
#endif
    SECTION(kv.first) {
      for (auto mode : {ptread::LoadMode::mmap, ptread::LoadMode::read, ptread::LoadMode::memory}) {
        check_file(fixture_dir(), kv.first, kv.second, mode);
      }
    }
  }
}

// Checkpoints in the forms only torch 2.x writes (tests/fixtures/gen_torch2.py, run with torch
// 2.x on the GPU machine; the expectations are its torch.load's): CRC-32 left out, 4 KiB
// storage alignment, the legacy format as 2.x writes it, uint16/32/64, float8 and complex32
// tensors, COO with is_coalesced, CSC/BSR/BSC, nested tensors, 2.x's module, optimizer and
// scheduler state, TorchScript. The same checks as torch 1.13's fixtures above.
TEST_CASE("torch 2.x-written fixtures read as torch 2.x reads them", "[fixtures][torch2]") {
  const Json& exp = cached_json(torch2_dir() + "/expected.json");
  INFO("written by torch " << exp["torch"].as_string());
  const Json& files = exp["files"];
  REQUIRE(files.size() >= 10);
  SECTION("forms gen_torch2.py could not write with that torch") {
    for (const auto& f : exp["failed"].as_object()) {
      WARN(f.first << " is not among the torch 2.x fixtures: gen_torch2.py could not write it (expected.json's failed)");
      CHECK_FALSE(files.contains(f.first));
    }
  }
  for (const auto& kv : files.as_object()) {
    SECTION(kv.first) {
      for (auto mode : {ptread::LoadMode::mmap, ptread::LoadMode::read, ptread::LoadMode::memory}) {
        check_file(torch2_dir(), kv.first, kv.second, mode);
      }
    }
  }
}

// The dtypes torch 2.x saves beyond DESIGN.md's list (float4_e2m1fn_x2, bits8 ...), one file
// each: a dtype ptread knows reads bit for bit as torch gives it; one it does not is refused
// with unknown_dtype naming it, never read as something else.
TEST_CASE("dtypes only torch 2.x saves are read bit for bit or refused by name", "[fixtures][torch2]") {
  const Json& exp = cached_json(torch2_dir() + "/expected.json");
  const Json& files = exp["dtype_files"];
  REQUIRE(files.size() >= 6);  // torch 2.11: float4_e2m1fn_x2, bits8, bits16, bits1x8, bits2x4, bits4x2
  for (const auto& kv : files.as_object()) {
    const Json& e = kv.second;
    const std::string torch_name = e["dtype"].as_string();  // "torch.bits8"
    INFO(kv.first << ": torch reads " << torch_name);
    ptread::DType dt = ptread::DType::U8;
    const bool known = ptread::detail::dtype_from_torch_name(std::string_view(torch_name).substr(6), &dt);
    for (auto mode : {ptread::LoadMode::mmap, ptread::LoadMode::read, ptread::LoadMode::memory}) {
      std::vector<unsigned char> keep;
      auto ck = open_in_mode(torch2_dir() + "/" + kv.first, mode, &keep);
      if (known) {
        INFO((ck.ok() ? std::string() : ck.error().str()));
        REQUIRE(ck.ok());
        REQUIRE(ck->tensors().size() == 1);
        const ptread::Tensor& t = ck->tensors()[0].tensor;
        CHECK(t.dtype() == dt);
        CHECK(ptread::dtype_size(dt) == static_cast<size_t>(e["itemsize"].as_int()));
        CHECK(shape_str(t.shape()) == shape_str(e["shape"]));
        CHECK(shape_str(t.strides()) == shape_str(e["strides"]));
        CHECK(tensor_sha256(t) == e["sha256"].as_string());
      } else {
        REQUIRE(!ck.ok());
        CHECK(ck.error().code() == ptread::ErrorCode::unknown_dtype);
        CHECK(ck.error().message().find("'" + torch_name + "'") != std::string::npos);
      }
    }
  }
}

ptread::ErrorCode code_for(const std::string& keyword) {
  using ptread::ErrorCode;
  static const std::map<std::string, ErrorCode> m = {
      {"empty_file", ErrorCode::empty_file},
      {"git_lfs_pointer", ErrorCode::git_lfs_pointer},
      {"html_page", ErrorCode::html_page},
      {"truncated", ErrorCode::truncated},
      {"safetensors_file", ErrorCode::safetensors_file},
      {"no_data_pkl", ErrorCode::no_data_pkl},
      {"record_missing", ErrorCode::record_missing},
      {"view_out_of_bounds", ErrorCode::view_out_of_bounds},
      {"unknown_storage_class", ErrorCode::unknown_storage_class},
      {"unknown_dtype", ErrorCode::unknown_dtype},
      {"unknown_format", ErrorCode::unknown_format},
      {"legacy_corrupt", ErrorCode::legacy_corrupt},
      {"pickle_malformed", ErrorCode::pickle_malformed},
  };
  auto it = m.find(keyword);
  return it == m.end() ? ErrorCode::ok : it->second;
}

TEST_CASE("broken files give the error that names what they are", "[fixtures][errors]") {
  const Json& errors = expected()["errors"];
  REQUIRE(errors.size() >= 10);
  for (const auto& kv : errors.as_object()) {
    SECTION(kv.first) {
      const ptread::ErrorCode want = code_for(kv.second["expect"].as_string());
      REQUIRE(want != ptread::ErrorCode::ok);
      for (auto mode : {ptread::LoadMode::mmap, ptread::LoadMode::read, ptread::LoadMode::memory}) {
        std::vector<unsigned char> keep;
        auto ck = open_in_mode(fixture_dir() + "/" + kv.first, mode, &keep);
        INFO(kv.first << " in mode " << ptread::load_mode_name(mode));
        REQUIRE_FALSE(ck.ok());
        INFO(ck.error().str());
        CHECK(ck.error().code() == want);
        CHECK(ck.error().str().rfind(error_tag(want), 0) == 0);
        if (mode != ptread::LoadMode::memory) CHECK(ck.error().str().find(kv.first) != std::string::npos);
      }
    }
  }
}

TEST_CASE("Value accessors of the wrong type say what they expected and found", "[fixtures][value]") {
  // train.pt (expected.json's scalars): epoch 7, best_acc 0.9375, arch 'mlp', flag True,
  // big_int 2**70, none None, blob bytes.
  auto ck = ptread::Checkpoint::open(fixture_dir() + "/train.pt");
  REQUIRE(ck.ok());
  const ptread::Value root = ck->root();
  const ptread::Value epoch = root["epoch"], acc = root["best_acc"], arch = root["arch"], flag = root["flag"];
  const ptread::Value big = root["big_int"], none = root["none"], blob = root["blob"], gone = root["no_such_key"];
  REQUIRE((epoch.is_int() && acc.is_float() && arch.is_string() && flag.is_bool() && big.is_int() && none.is_none() &&
           blob.is_bytes() && gone.is_missing()));
  auto mismatch = [](const auto& r, const char* expected, const char* found) {
    REQUIRE_FALSE(r.ok());
    INFO(r.error().str());
    CHECK(r.error().code() == ptread::ErrorCode::invalid_argument);
    CHECK(r.error().str().find(std::string("expected ") + expected + ", found " + found) != std::string::npos);
  };
  mismatch(epoch.as_bool(), "bool", "int");
  mismatch(arch.as_int(), "int", "str");
  mismatch(arch.as_float(), "float", "str");
  mismatch(epoch.as_string(), "str", "int");
  mismatch(arch.as_bytes(), "bytes", "str");
  mismatch(blob.as_string(), "str", "bytes");
  mismatch(none.as_tensor(), "tensor", "None");
  mismatch(acc.as_quantized(), "quantized tensor", "float");
  mismatch(acc.as_sparse(), "sparse tensor", "float");
  mismatch(epoch.as_storage(), "storage", "int");
  // What converts, as in Python: bool -> int, int -> float.
  CHECK(*flag.as_int() == 1);
  CHECK(*epoch.as_float() == 7.0);
  // 2**70 is an int, but not an int64_t.
  auto b = big.as_int();
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().code() == ptread::ErrorCode::limit_exceeded);
  CHECK(b.error().str().find("1180591620717411303424") != std::string::npos);
  CHECK(big.big_int_decimal() == "1180591620717411303424");
  CHECK(epoch.big_int_decimal() == "7");
  CHECK(arch.big_int_decimal().empty());
  // A missing value: not_found, whatever was asked.
  auto m = gone.as_float();
  REQUIRE_FALSE(m.ok());
  CHECK(m.error().code() == ptread::ErrorCode::not_found);
  CHECK_FALSE(static_cast<bool>(gone));
  CHECK(static_cast<bool>(none));
}

TEST_CASE("storages saved on their own share their bytes with the tensors over them", "[fixtures][value]") {
  // storages.pt, legacy_storages.pt and tar_storages.pt (expected.json's scalars hold their
  // dtypes, sizes and bytes): 'w_storage' is the storage of tensor 'w'; 'w' is a tensor, not
  // a storage.
  for (const char* name : {"storages.pt", "legacy_storages.pt", "tar_storages.pt"}) {
    for (auto mode : {ptread::LoadMode::mmap, ptread::LoadMode::read, ptread::LoadMode::memory}) {
      INFO(name << ", mode " << ptread::load_mode_name(mode));
      std::vector<unsigned char> keep;
      auto ck = open_in_mode(fixture_dir() + "/" + name, mode, &keep);
      REQUIRE(ck.ok());
      const ptread::Tensor* w = ck->find("w");
      REQUIRE(w != nullptr);
      auto ws = ck->root()["w_storage"].as_storage();
      REQUIRE(ws.ok());
      CHECK(ws->storage() == w->storage());
      CHECK(ws->data_ptr() == w->data_ptr());
      CHECK(ws->numel() == w->numel());
      CHECK_FALSE(ck->root()["w"].is_storage());
      auto not_one = ck->root()["w"].as_storage();
      REQUIRE_FALSE(not_one.ok());
      CHECK(not_one.error().code() == ptread::ErrorCode::invalid_argument);
      // storages are no tensors: ls lists 'w' alone (and the tar file's 'root' and 'v')
      CHECK(ck->tensor_count() == (std::string(name) == "tar_storages.pt" ? 3u : 1u));
      if (mode == ptread::LoadMode::memory && std::string(name) == "storages.pt") {
        // A view of the file's bytes, no copy: 'half' lies in its stored record.
        auto half = ck->root()["half"].as_storage();
        REQUIRE(half.ok());
        const auto* p = static_cast<const unsigned char*>(half->data_ptr());
        CHECK((p >= keep.data() && p + half->nbytes() <= keep.data() + keep.size()));
      }
    }
  }
}

TEST_CASE("dicts given a key twice hold it once, as Python's dicts do", "[fixtures][value]") {
  // dict_keys.pt (generate.py, torch.load's result in expected.json): keys 'w', 'x', 1
  // (given as 1, True, 1.0), ..., -0.0 (given as -0.0, 0).
  auto ck = ptread::Checkpoint::open(fixture_dir() + "/dict_keys.pt");
  REQUIRE(ck.ok());
  const ptread::Value root = ck->root();
  CHECK(root.size() == 15);
  CHECK(root.key(0).as_string().value() == "w");
  CHECK(root.key(1).as_string().value() == "x");
  CHECK(root.key(2).is_int());  // the first of 1, True, 1.0: an int
  // Value lookups find the one key, its last value: the tensor listed under its name.
  CHECK(root["w"].as_tensor().value() == ck->find("w"));
  CHECK(root.at_int_key(1).as_tensor().value() == ck->find("1"));
  // Python's d[0] finds the key -0.0 (0 == -0.0); ptread's at_int_key too.
  REQUIRE(root.key(5).is_float());
  CHECK(std::signbit(root.key(5).as_float().value()));
  CHECK(root.at_int_key(0).as_tensor().value() == ck->find("-0.0"));
  CHECK(root["od"].size() == 2);
  CHECK(root["od"]["p"].as_tensor().value() == ck->find("od.p"));
}

TEST_CASE("frozenset keys compare as sets, whatever the order of their items", "[fixtures][value]") {
  // frozenset_keys.pt (generate.py; torch.load's lengths in expected.json, its values
  // asserted there): 3,000 distinct frozenset keys, two equal 3,000-item frozensets pickled
  // in other orders, and frozensets in frozensets. All three were E502 (one hash for every
  // frozenset: each key compared with all others, over the budget).
  auto ck = ptread::Checkpoint::open(fixture_dir() + "/frozenset_keys.pt");
  REQUIRE(ck.ok());
  const ptread::Value root = ck->root();
  const ptread::Value sets = root["sets"];
  REQUIRE(sets.size() == 3000);
  for (size_t i : {size_t{0}, size_t{1}, size_t{2999}}) {
    REQUIRE(sets.key(i).kind() == ptread::ValueKind::frozenset);
    REQUIRE(sets.key(i).size() == 1);
    CHECK(sets.key(i)[0].as_int().value() == static_cast<int64_t>(i));
    CHECK(sets.value(i).as_int().value() == static_cast<int64_t>(i));
  }
  const ptread::Value big = root["big"];
  REQUIRE(big.size() == 1);
  CHECK(big.key(0).size() == 3000);
  CHECK(big.value(0).as_int().value() == 2);  // the first key's place, the last value
  const ptread::Value nested = root["nested"];
  REQUIRE(nested.size() == 1);
  CHECK(nested.value(0).as_int().value() == 2);
}

TEST_CASE("files mistaken for checkpoints are named for what they are", "[fixtures][errors]") {
  auto check = [](const ptread::Result<ptread::Checkpoint>& ck, ptread::ErrorCode code, const char* says) {
    REQUIRE_FALSE(ck.ok());
    INFO(ck.error().str());
    CHECK(ck.error().code() == code);
    CHECK(ck.error().str().find(says) != std::string::npos);
  };
  // A real checkpoint, gzipped (generate.py: err_gzip.pt; torch.load refuses it too).
  check(ptread::Checkpoint::open(fixture_dir() + "/err_gzip.pt"), ptread::ErrorCode::unknown_format,
        "gzip-compressed data: decompress it first");
  // Formats torch 1.13 cannot write here: the heads they start with.
  std::vector<unsigned char> flatbuffer(64, 0);  // root offset, then the file identifier
  flatbuffer[0] = 0x18;
  std::memcpy(flatbuffer.data() + 4, "PTMF", 4);
  check(ptread::Checkpoint::open_memory(flatbuffer.data(), flatbuffer.size()), ptread::ErrorCode::unsupported_format,
        "TorchScript mobile flatbuffer");
  std::vector<unsigned char> preview(64, 0);
  std::memcpy(preview.data(), "PYTORCH1", 8);
  check(ptread::Checkpoint::open_memory(preview.data(), preview.size()), ptread::ErrorCode::unsupported_format,
        "PyTorch 1.0 preview");
}
