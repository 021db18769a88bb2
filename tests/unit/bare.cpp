// Bare pickles (pickle.dump of tensors, state dicts, whole models: each storage an archive
// read by torch.storage._load_from_bytes) and such archives inside torch.save files
// (tests/fixtures/gen_bare.py; the oracle is pickle.load with torch imported).
#include <catch2/catch.hpp>

#include "support/helpers.hpp"

#include <map>

using namespace ptread_test;

namespace {

std::string bare_dir() { return fixture_dir() + "/bare"; }

const ptread::LoadMode kBareModes[] = {ptread::LoadMode::mmap, ptread::LoadMode::read, ptread::LoadMode::memory};

}  // namespace

TEST_CASE("bare pickles read as pickle.load reads them, running nothing", "[bare]") {
  const Json& files = cached_json(bare_dir() + "/expected.json")["read"];
  REQUIRE(files.size() >= 9);
  size_t torch_refuses = 0, in_place = 0;
  for (const auto& f : files.as_object()) {
    torch_refuses += f.second["torch_load"].as_string() == "refuses";
    for (const ptread::LoadMode mode : kBareModes) {
      INFO(f.first << " mode " << static_cast<int>(mode));
      std::vector<unsigned char> keep;
      auto ck = open_in_mode(bare_dir() + "/" + f.first, mode, &keep);
      REQUIRE(ck.ok());
      CHECK(std::string(ck->format_name()) == f.second["format"].as_string());
      std::map<std::string, const ptread::Tensor*> got;
      for (const auto& nt : ck->tensors()) got.emplace(nt.name, &nt.tensor);
      const Json& want = f.second["tensors"];
      CHECK(got.size() == want.size());
      for (const auto& w : want.as_array()) {
        INFO("tensor '" << w["name"].as_string() << "'");
        const auto it = got.find(w["name"].as_string());
        REQUIRE(it != got.end());
        CHECK(std::string(ptread::dtype_name(it->second->dtype())) == w["dtype"].as_string());
        CHECK(shape_str(it->second->shape()) == shape_str(w["shape"]));
        CHECK(tensor_sha256(*it->second) == w["sha256"].as_string());
        // Archives of 4 KiB or more are read where the caller's buffer holds them, where
        // their storage's bytes suit the dtype's alignment there (else copied).
        const auto* p = static_cast<const unsigned char*>(it->second->data_ptr());
        CHECK(reinterpret_cast<uintptr_t>(p) % std::min<size_t>(ptread::dtype_size(it->second->dtype()), 8) == 0);
        if (mode == ptread::LoadMode::memory && it->second->storage()->nbytes() >= 4096) {
          in_place += p >= keep.data() && p < keep.data() + keep.size();
        }
      }
      if (f.second["storage"].is_object()) {  // a storage a _load_from_bytes call made
        const Json& s = f.second["storage"];
        auto st = ck->root()[s["key"].as_string()].as_storage();
        REQUIRE(st.ok());
        CHECK(std::string(ptread::dtype_name(st->dtype())) == s["dtype"].as_string());
        CHECK(tensor_sha256(*st) == s["sha256"].as_string());
      }
    }
  }
  CHECK(torch_refuses >= 8);  // torch.load refuses the bare pickles; pickle.load reads them
  CHECK(in_place >= 6);       // (state_dict_p4 and _p5's: w, v, tied share one aligned storage)
}

TEST_CASE("bare pickles and nested archives ptread refuses, the reason named", "[bare]") {
  const Json& files = cached_json(bare_dir() + "/expected.json")["refused"];
  REQUIRE(files.size() >= 4);
  for (const auto& f : files.as_object()) {
    INFO(f.first << " (pickle.load: " << f.second["pickle_load"].as_string() << ")");
    for (const ptread::LoadMode mode : kBareModes) {
      std::vector<unsigned char> keep;
      auto ck = open_in_mode(bare_dir() + "/" + f.first, mode, &keep);
      REQUIRE_FALSE(ck.ok());
      INFO(ck.error().what());
      CHECK(ptread::error_code_name(ck.error().code()) == f.second["expect"].as_string());
      CHECK(ck.error().message().find(f.second["says"].as_string()) != std::string::npos);
    }
  }
}

TEST_CASE("archive nesting follows Limits::max_archive_nesting", "[bare]") {
  const std::string nested = bare_dir() + "/nested5.pkl";  // five archives deep
  ptread::Options o;
  o.limits.max_archive_nesting = 5;
  auto ck = ptread::Checkpoint::open(nested, o);
  REQUIRE(ck.ok());
  const ptread::Tensor* t = ck->find("t");
  REQUIRE(t != nullptr);
  auto v = t->to_float32();
  REQUIRE(v.ok());
  CHECK(*v == std::vector<float>{0, 1, 2, 3, 4, 5});
  o.limits.max_archive_nesting = 1;
  auto two = ptread::Checkpoint::open(bare_dir() + "/nested2.pkl", o);
  REQUIRE_FALSE(two.ok());
  CHECK(two.error().code() == ptread::ErrorCode::limit_exceeded);
}

TEST_CASE("audit of a bare pickle names what pickle.load imports, its archives' too", "[bare]") {
  auto ck = ptread::Checkpoint::open(bare_dir() + "/model.pkl");
  REQUIRE(ck.ok());
  const ptread::AuditReport r = ptread::audit(*ck);
  std::map<std::string, bool> allowed;
  for (const auto& g : r.globals) allowed[g.module + "." + g.name] = g.allowed;
  REQUIRE(allowed.count("torch.storage._load_from_bytes"));
  CHECK_FALSE(allowed["torch.storage._load_from_bytes"]);
  REQUIRE(allowed.count("torch.nn.modules.linear.Linear"));
  CHECK_FALSE(allowed["torch.nn.modules.linear.Linear"]);
  CHECK(allowed.count("torch.FloatStorage"));  // named by the nested archives' pickles
}
