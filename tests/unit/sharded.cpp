// Sharded sets (tests/fixtures/gen_sharded.py): .bin shards written by torch.save (zip and
// legacy), .safetensors shards by numpy by the spec, indexes as transformers writes them;
// the oracle of a .bin shard is torch.load of it. Sets that disagree with their index are
// refused with an error that names the file and the tensor.
#include <catch2/catch.hpp>

#include "support/helpers.hpp"

#include <algorithm>
#include <set>

using namespace ptread_test;

namespace {

std::string sharded_dir() { return fixture_dir() + "/sharded"; }

const ptread::LoadMode kShardedModes[] = {ptread::LoadMode::mmap, ptread::LoadMode::read};

}  // namespace

TEST_CASE("sharded sets read as one checkpoint, each tensor with its shard", "[sharded]") {
  const Json& sets = cached_json(sharded_dir() + "/expected.json")["read"];
  REQUIRE(sets.size() >= 4);
  for (const auto& set : sets.as_object()) {
    for (const auto& how : set.second["open"].as_array()) {
      for (const ptread::LoadMode mode : kShardedModes) {
        const std::string path = sharded_dir() + "/" + set.first + "/" + how.as_string();
        INFO(path << " mode " << static_cast<int>(mode));
        ptread::Options o;
        o.mode = mode;
        auto ck = ptread::Checkpoint::open(path, o);
        REQUIRE(ck.ok());
        CHECK(ck->format() == ptread::Format::sharded);
        const Json& want = set.second["tensors"];
        REQUIRE(ck->tensor_count() == want.size());
        REQUIRE(ck->tensors().size() == want.size());
        std::set<std::string> shards;
        for (size_t k = 0; k < want.size(); ++k) {
          const Json& w = want[k];
          INFO("tensor " << w["name"].as_string());
          const ptread::TensorInfo info = ck->tensor_info(k);
          CHECK(info.name == w["name"].as_string());
          CHECK(info.shard == w["shard"].as_string());
          shards.insert(std::string(info.shard));
          const ptread::Tensor& t = ck->tensors()[k].tensor;
          CHECK(std::string(ptread::dtype_name(t.dtype())) == w["dtype"].as_string());
          CHECK(shape_str(t.shape()) == shape_str(w["shape"]));
          CHECK(tensor_sha256(t) == w["sha256"].as_string());
          auto got = ck->get(w["name"].as_string());
          REQUIRE(got.ok());
          CHECK(tensor_sha256(*got) == w["sha256"].as_string());
          // root(): a dict of the tensors by name
          auto r = ck->root()[w["name"].as_string()].as_tensor();
          REQUIRE(r.ok());
          CHECK(tensor_sha256(**r) == w["sha256"].as_string());
        }
        CHECK(std::set<std::string>(ck->shards().begin(), ck->shards().end()) == shards);
        CHECK(std::is_sorted(ck->shards().begin(), ck->shards().end()));
      }
    }
  }
}

TEST_CASE("sharded sets that disagree with their index are refused, file and tensor named", "[sharded]") {
  const Json& sets = cached_json(sharded_dir() + "/expected.json")["refused"];
  REQUIRE(sets.size() >= 13);
  for (const auto& set : sets.as_object()) {
    const std::string path = sharded_dir() + "/" + set.first + "/" + set.second["open"].as_string();
    INFO(path << ": " << set.second["says"].as_string());
    auto ck = ptread::Checkpoint::open(path);
    REQUIRE_FALSE(ck.ok());
    INFO(ck.error().what());
    CHECK(ptread::error_code_name(ck.error().code()) == set.second["expect"].as_string());
    CHECK(ck.error().message().find(set.second["says"].as_string()) != std::string::npos);
  }
}

TEST_CASE("an index is opened by path, not from memory", "[sharded]") {
  const std::vector<unsigned char> bytes = read_file(sharded_dir() + "/st2/model.safetensors.index.json");
  auto ck = ptread::Checkpoint::open_memory(bytes.data(), bytes.size());
  REQUIRE_FALSE(ck.ok());
  CHECK(ck.error().code() == ptread::ErrorCode::invalid_argument);
  CHECK(ck.error().message().find("open a set by the path of its index or folder") != std::string::npos);
}

TEST_CASE("a shard's name: relative, inside the index's folder", "[sharded]") {
  using ptread::detail::shard_name_ok;
  CHECK(shard_name_ok("model-00001-of-00002.safetensors"));
  CHECK(shard_name_ok("weights/model.bin"));
  CHECK(shard_name_ok("..model.bin"));
  for (const char* bad : {"", "/etc/passwd", "../x.bin", "a/../../x.bin", "a//b", "C:/x.bin", "a\\b.bin", "a/", "./.."}) {
    INFO(bad);
    CHECK_FALSE(shard_name_ok(bad));
  }
}

TEST_CASE("audit of a set counts the globals of its shards", "[sharded]") {
  auto ck = ptread::Checkpoint::open(sharded_dir() + "/bin3");
  REQUIRE(ck.ok());
  const ptread::AuditReport r = ptread::audit(*ck);
  CHECK(r.format == "sharded");
  size_t rebuilds = 0;
  for (const auto& g : r.globals) {
    if (g.module == "torch._utils" && g.name == "_rebuild_tensor_v2") rebuilds = g.count;
  }
  CHECK(rebuilds == 3);  // named once in each shard's pickle (memoized after)
  CHECK(r.refused() == 0);
}
