// Checkpoints torch 2.x saved from real CUDA tensors (tests/fixtures/cuda, written on a GPU
// machine by tests/fixtures/gen_cuda.py), read on the CPU and compared with what torch read
// back: names, dtypes (fp8, uint16 ...), shapes, strides, offsets, location tags, values,
// storage sharing. A hidden test: CTest's cuda_fixtures runs it when the directory exists and
// reports the test skipped when it does not.
#include <catch2/catch.hpp>

#include "support/helpers.hpp"

#include <map>
#include <string>

namespace {

using ptread_test::Json;

std::string cuda_fixture_dir() { return ptread_test::fixture_dir() + "/cuda"; }

}  // namespace

TEST_CASE("fixtures saved from CUDA tensors by torch 2.x read as torch read them", "[.cuda_fixtures]") {
  const std::string dir = cuda_fixture_dir();
  const Json& exp = ptread_test::cached_json(dir + "/expected.json");
  INFO("written by torch " << exp["torch"].as_string() << " on " << exp["cuda_device"].as_string());
  const Json::Object& files = exp["files"].as_object();
  REQUIRE(files.size() >= 3);
  for (const Json::Member& fm : files) {
    const std::string& file = fm.first;
    const Json& want = fm.second;
    for (ptread::LoadMode mode : {ptread::LoadMode::mmap, ptread::LoadMode::read, ptread::LoadMode::memory}) {
      INFO(file << " " << ptread::load_mode_name(mode));
      std::vector<unsigned char> keep;
      auto ck = ptread_test::open_in_mode(dir + "/" + file, mode, &keep);
      REQUIRE(ck.ok());
      CHECK(std::string(ck->format_name()) == want["format"].as_string());
      const Json& tensors = want["tensors"];
      REQUIRE(ck->tensors().size() == tensors.size());
      std::map<int64_t, const ptread::Storage*> group_storage;
      std::map<const ptread::Storage*, int64_t> storage_group;
      for (size_t i = 0; i < tensors.size(); ++i) {
        const Json& e = tensors[i];
        const ptread::NamedTensor& nt = ck->tensors()[i];
        INFO(e["name"].as_string());
        ptread_test::check_tensor_entry(nt, e);
        CHECK(ptread_test::shape_str(nt.tensor.strides()) == ptread_test::shape_str(e["strides"]));
        CHECK(nt.tensor.storage_offset() == e["storage_offset"].as_int());
        CHECK(nt.tensor.requires_grad() == e["requires_grad"].as_bool());
        CHECK(nt.tensor.device() == e["device"].as_string());
        if (nt.tensor.numel() == 0) continue;
        auto g = group_storage.emplace(e["storage_group"].as_int(), nt.tensor.storage().get());
        auto s = storage_group.emplace(nt.tensor.storage().get(), e["storage_group"].as_int());
        CHECK(g.first->second == nt.tensor.storage().get());  // torch's shared storages share here
        CHECK(s.first->second == e["storage_group"].as_int());  // and only those
      }
    }
  }
}
