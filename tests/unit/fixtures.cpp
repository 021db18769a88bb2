// Checkpoints written by real torch (tests/fixtures/generate.py) read as torch.load reads
// them: names in file order, dtypes, shapes, strides, offsets, devices, requires_grad,
// bit-identical values, storage sharing, and metadata in the object tree. With
// PTREAD_FIXTURES set, the same checks run on freshly generated files.
#include <catch2/catch.hpp>

#include "support/helpers.hpp"

#include <map>

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

void check_file(const std::string& file, const Json& exp, ptread::LoadMode mode) {
  std::vector<unsigned char> keep;
  auto ck = open_in_mode(fixture_dir() + "/" + file, mode, &keep);
  INFO("file " << file << ", mode " << ptread::load_mode_name(mode));
  REQUIRE(ck.ok());
  CHECK(std::string(ck->format_name()) == exp["format"].as_string());
  CHECK(ck->archive_prefix() == exp["archive_prefix"].as_string() + "/");
  CHECK(ck->unsupported().empty());

  const Json& tensors = exp["tensors"];
  REQUIRE(ck->tensors().size() == tensors.size());
  std::map<int64_t, const ptread::Storage*> groups;
  std::map<const ptread::Storage*, int64_t> group_of;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Json& e = tensors[k];
    const auto& nt = ck->tensors()[k];
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
    INFO("scalar " << k << " of type " << type << ", found " << v.repr());
    if (type == "int") {
      auto r = v.as_int();
      REQUIRE(r.ok());
      CHECK(*r == s["value"].as_int());
    } else if (type == "int_big") {
      CHECK(v.is_int());
      CHECK(v.big_int_decimal() == s["value"].as_string());
    } else if (type == "float") {
      auto r = v.as_float();
      REQUIRE(r.ok());
      CHECK(*r == s["value"].as_double());
    } else if (type == "str") {
      auto r = v.as_string();
      REQUIRE(r.ok());
      CHECK(std::string(*r) == s["value"].as_string());
    } else if (type == "bool") {
      auto r = v.as_bool();
      REQUIRE(r.ok());
      CHECK(*r == s["value"].as_bool());
    } else if (type == "none") {
      CHECK(v.is_none());
    } else if (type == "bytes") {
      auto r = v.as_bytes();
      REQUIRE(r.ok());
      CHECK(to_hex(*r) == s["hex"].as_string());
    } else {
      FAIL("unknown scalar type " << type);
    }
  }
}

}  // namespace

TEST_CASE("torch-written fixtures read as torch.load reads them", "[fixtures]") {
  const Json& files = expected()["files"];
  REQUIRE(files.size() >= 15);
  for (const auto& kv : files.as_object()) {
#if PTREAD_WITH_ZLIB == 0
    if (kv.first == "deflate.pt") continue;  // covered by the zlib-less error test
#endif
    SECTION(kv.first) {
      for (auto mode : {ptread::LoadMode::mmap, ptread::LoadMode::read, ptread::LoadMode::memory}) {
        check_file(kv.first, kv.second, mode);
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
