// safetensors files: the fixtures numpy wrote by the format's spec
// (tests/fixtures/gen_safetensors.py: what each holds, what each breaks, and whether Python's
// json takes its header), and the real files of ../shared/corpus/safetensors (written by
// Python and Rust safetensors, candle, burn, MLX, Julia, R ...; their oracle read by Python).
#include <catch2/catch.hpp>

#include "support/helpers.hpp"

#include <fstream>
#include <set>
#include <sstream>

using namespace ptread_test;

namespace {

const ptread::LoadMode kSafetensorsModes[] = {ptread::LoadMode::mmap, ptread::LoadMode::read, ptread::LoadMode::memory};

std::string st_dir() { return fixture_dir() + "/safetensors"; }

// A string as Python's json.dumps(ensure_ascii=True) writes it.
std::string python_json_string(std::string_view s) {
  std::string out = "\"";
  char b[16];
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = 0;
    const size_t n = ptread::detail::utf8_next(s, i, &cp);  // (valid UTF-8: the reader checked it)
    i += n == 0 ? 1 : n;
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp >= 0x20 && cp < 0x7f) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x10000) {
      std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(cp));
      out += b;
    } else {
      const uint32_t v = cp - 0x10000;
      std::snprintf(b, sizeof b, "\\u%04x\\u%04x", static_cast<unsigned>(0xd800 + (v >> 10)),
                    static_cast<unsigned>(0xdc00 + (v & 0x3ff)));
      out += b;
    }
  }
  return out + "\"";
}

// The value the reader is at, as Python's json.dumps(..., ensure_ascii=True,
// separators=(",", ":")) writes what json.loads read (integers and the short floats of the
// fixtures print the same in both).
ptread::Status canonical_json(ptread::detail::JsonReader& j, std::string* out) {
  using ptread::detail::JsonType;
  std::string text;
  switch (j.peek()) {
    case JsonType::object: {
      PTREAD_CHECK(j.begin_object());
      *out += "{";
      bool first = true;
      for (;;) {
        PTREAD_TRY(bool more, j.next_member(&text));
        if (!more) break;
        *out += (first ? "" : ",") + python_json_string(text) + ":";
        first = false;
        PTREAD_CHECK(canonical_json(j, out));
      }
      *out += "}";
      return {};
    }
    case JsonType::array: {
      PTREAD_CHECK(j.begin_array());
      *out += "[";
      bool first = true;
      for (;;) {
        PTREAD_TRY(bool more, j.next_item());
        if (!more) break;
        if (!first) *out += ",";
        first = false;
        PTREAD_CHECK(canonical_json(j, out));
      }
      *out += "]";
      return {};
    }
    case JsonType::string:
      PTREAD_CHECK(j.string(&text));
      *out += python_json_string(text);
      return {};
    case JsonType::number: {
      PTREAD_TRY(std::string_view t, j.number_text());
      *out += std::string(t);
      return {};
    }
    case JsonType::boolean: {
      PTREAD_TRY(bool v, j.boolean());
      *out += v ? "true" : "false";
      return {};
    }
    case JsonType::null:
      PTREAD_CHECK(j.null());
      *out += "null";
      return {};
    case JsonType::end: break;
  }
  return j.fail("no value");
}

std::string st_header_of(const std::vector<unsigned char>& file) {
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | file[static_cast<size_t>(k)];
  return std::string(reinterpret_cast<const char*>(file.data()) + 8, static_cast<size_t>(n));
}

void check_st_metadata(const ptread::Checkpoint& ck, const Json& want) {
  const ptread::Value md = ck.root()["__metadata__"];
  if (want.is_string()) {  // "absent"
    CHECK(want.as_string() == "absent");
    CHECK(md.is_missing());
    return;
  }
  if (want.is_null()) {
    CHECK(md.is_none());
    return;
  }
  REQUIRE(md.is_dict());
  CHECK(md.size() == want.size());
  for (const auto& kv : want.as_object()) {
    INFO("metadata key " << kv.first);
    auto v = md[kv.first].as_string();
    REQUIRE(v.ok());
    CHECK(std::string(*v) == kv.second.as_string());
  }
}

bool in_buffer(const void* p, const std::vector<unsigned char>& buf) {
  const auto* q = static_cast<const unsigned char*>(p);
  return q >= buf.data() && q < buf.data() + buf.size();
}

}  // namespace

TEST_CASE("safetensors written by the spec read as written, in every mode", "[safetensors]") {
  const Json& expected = cached_json(st_dir() + "/expected.json");
  const Json& files = expected["read"];
  REQUIRE(files.size() >= 8);
  for (const auto& f : files.as_object()) {
    INFO(f.first);
    for (const ptread::LoadMode mode : kSafetensorsModes) {
      INFO("mode " << static_cast<int>(mode));
      std::vector<unsigned char> keep;
      auto ck = open_in_mode(st_dir() + "/" + f.first, mode, &keep);
      REQUIRE(ck.ok());
      CHECK(ck->format() == ptread::Format::safetensors);
      CHECK(std::string(ck->format_name()) == "safetensors");
      CHECK(ck->root().is_dict());
      const Json& want = f.second["tensors"];
      const auto& got = ck->tensors();
      REQUIRE(got.size() == want.size());
      REQUIRE(ck->tensor_count() == want.size());
      for (size_t k = 0; k < got.size(); ++k) {
        const Json& w = want[k];
        INFO("tensor " << w["name"].as_string());
        CHECK(got[k].name == w["name"].as_string());  // header order, names as stored
        CHECK(std::string(ptread::dtype_name(got[k].tensor.dtype())) == w["dtype"].as_string());
        CHECK(shape_str(got[k].tensor.shape()) == shape_str(w["shape"]));
        CHECK(tensor_sha256(got[k].tensor) == w["sha256"].as_string());
        CHECK(got[k].tensor.device() == "cpu");
        CHECK(got[k].tensor.is_contiguous());
        const ptread::TensorInfo info = ck->tensor_info(k);
        CHECK(info.name == got[k].name);
        CHECK(info.nbytes == got[k].tensor.nbytes());
        // The data suits its dtype; in memory mode it is the caller's buffer where the
        // file put it aligned (zero-copy), a copy where not.
        const size_t align = std::min<size_t>(ptread::dtype_size(got[k].tensor.dtype()), 8);
        const auto addr = reinterpret_cast<uintptr_t>(got[k].tensor.data_ptr());
        CHECK(addr % align == 0);
        if (mode == ptread::LoadMode::memory && got[k].tensor.nbytes() > 0) {
          const auto at = static_cast<size_t>(w["file_offset"].as_int());
          if (at % align == 0) {  // (the buffer itself is aligned to 8 at least)
            CHECK(got[k].tensor.data_ptr() == keep.data() + at);
          } else {
            CHECK_FALSE(in_buffer(got[k].tensor.data_ptr(), keep));
          }
        }
        if (mode == ptread::LoadMode::read && got[k].tensor.nbytes() > 0) CHECK_FALSE(in_buffer(got[k].tensor.data_ptr(), keep));
      }
      std::set<std::string> unsupported;
      for (const auto& u : ck->unsupported()) {
        unsupported.insert(u.name);
        CHECK(u.reason.find("safetensors dtype F") != std::string::npos);
      }
      std::set<std::string> want_unsupported;
      for (const auto& u : f.second["unsupported"].as_array()) want_unsupported.insert(u.as_string());
      CHECK(unsupported == want_unsupported);
      check_st_metadata(*ck, f.second["metadata"]);
    }
  }
}

TEST_CASE("safetensors that break the format are refused, the rule named", "[safetensors]") {
  const Json& refused = cached_json(st_dir() + "/expected.json")["refused"];
  REQUIRE(refused.size() >= 35);
  size_t python_takes = 0;
  for (const auto& f : refused.as_object()) {
    INFO(f.first << ": " << f.second["says"].as_string());
    python_takes += f.second["python_json"].as_bool();
    for (const ptread::LoadMode mode : kSafetensorsModes) {
      std::vector<unsigned char> keep;
      auto ck = open_in_mode(st_dir() + "/" + f.first, mode, &keep);
      REQUIRE_FALSE(ck.ok());
      INFO(ck.error().what());
      CHECK(ptread::error_code_name(ck.error().code()) == f.second["expect"].as_string());
      CHECK(ck.error().message().find(f.second["says"].as_string()) != std::string::npos);
    }
  }
  // Most break the format's rules with JSON Python reads; the generator records which.
  CHECK(python_takes >= 20);
}

TEST_CASE("the JSON reader reads each header as Python's json does", "[safetensors]") {
  const Json& files = cached_json(st_dir() + "/expected.json")["read"];
  for (const auto& f : files.as_object()) {
    INFO(f.first);
    const std::string header = st_header_of(read_file(st_dir() + "/" + f.first));
    ptread::detail::JsonReader j(header, "test", ptread::ErrorCode::safetensors_corrupt);
    std::string got;
    REQUIRE(canonical_json(j, &got).ok());
    REQUIRE(j.finish().ok());
    CHECK(got == f.second["header"].as_string());
  }
}

TEST_CASE("the JSON reader's grammar", "[safetensors]") {
  using ptread::detail::JsonReader;
  auto skips = [](const std::string& text) {
    JsonReader j(text, "t", ptread::ErrorCode::safetensors_corrupt);
    return j.skip().ok() && j.finish().ok();
  };
  for (const char* ok : {"{}", "[]", " [ 1 , -0 , 0.5 , 1e5 , 1E-5 , -1.25e+3 ] ", "\"\\u00e9\\ud83d\\ude00\\/\"",
                         "{\"a\":{\"b\":[null,true,false]}}", "\"\"", "0", "\t\r\n{}\t\r\n"}) {
    INFO(ok);
    CHECK(skips(ok));
  }
  for (const char* bad : {"", "{", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{1:2}", "01", "1.", ".5", "1e", "+1", "-",
                          "\"\\x\"", "\"\\u12\"", "\"\\udc00\"", "\"\\ud800x\"", "\"\\ud800\\u0041\"", "tru",
                          "nul", "NaN", "Infinity", "[1] [2]", "\"a\x01\"", "{\"a\":1}}", "[\"a\"", "\x0c{}"}) {
    INFO(bad);
    CHECK_FALSE(skips(bad));
  }
  std::string deep(128, '[');
  deep += std::string(128, ']');
  CHECK(skips(deep));
  CHECK_FALSE(skips("[" + deep + "]"));
  // unsigned_integer: serde_json's usize (no fraction, no exponent, -0 is 0)
  auto unsigned_of = [](const std::string& text) {
    JsonReader j(text, "t", ptread::ErrorCode::safetensors_corrupt);
    auto r = j.unsigned_integer();
    return r.ok() ? std::to_string(*r) : std::string("error");
  };
  CHECK(unsigned_of("18446744073709551615") == "18446744073709551615");
  CHECK(unsigned_of("18446744073709551616") == "error");
  CHECK(unsigned_of("-0") == "0");
  CHECK(unsigned_of("-1") == "error");
  CHECK(unsigned_of("1.0") == "error");
  CHECK(unsigned_of("1e0") == "error");
  CHECK(unsigned_of("007") == "error");
}

TEST_CASE("real safetensors files match their oracle", "[safetensors][corpus]") {
  const std::string dir = corpus_dir() + "/safetensors";
  if (!path_exists(dir + "/oracle.json")) {
    WARN("no safetensors corpus at " << dir << ": skipped");
    return;
  }
  Json oracle;
  std::string err;
  REQUIRE(read_json_file(dir + "/oracle.json", oracle, &err));
  REQUIRE(oracle.size() >= 38);
  for (const auto& f : oracle.as_object()) {
    INFO(f.first);
    for (const ptread::LoadMode mode : kSafetensorsModes) {
      std::vector<unsigned char> keep;
      auto ck = open_in_mode(dir + "/files/" + f.first, mode, &keep);
      REQUIRE(ck.ok());
      CHECK(ck->format() == ptread::Format::safetensors);
      const Json& tensors = f.second["tensors"];
      CHECK(ck->tensors().size() == tensors.size());
      CHECK(ck->unsupported().empty());
      for (const auto& kv : tensors.as_object()) {
        INFO("tensor " << kv.first);
        const ptread::Tensor* t = ck->find(kv.first);
        REQUIRE(t != nullptr);
        CHECK(std::string(ptread::dtype_name(t->dtype())) == kv.second["dtype"].as_string());
        CHECK(shape_str(t->shape()) == shape_str(kv.second["shape"]));
        CHECK(tensor_sha256(*t) == kv.second["sha256"].as_string());
      }
      const std::string state = f.second["metadata_state"].as_string();
      const ptread::Value md = ck->root()["__metadata__"];
      if (state == "absent") {
        CHECK(md.is_missing());
      } else if (state == "null") {
        CHECK(md.is_none());
      } else {
        REQUIRE(state == "present");
        check_st_metadata(*ck, f.second["metadata"]);
      }
    }
  }
}

TEST_CASE("real safetensors files that are broken are refused, the reason named", "[safetensors][corpus]") {
  const std::string dir = corpus_dir() + "/safetensors/refused";
  if (!path_exists(dir + "/SOURCES.tsv")) {
    WARN("no refused safetensors corpus at " << dir << ": skipped");
    return;
  }
  // What the SOURCES.tsv reasons say, as ptread's errors.
  const std::vector<std::pair<std::string, std::pair<ptread::ErrorCode, std::string>>> want = {
      {"shorter than 8 bytes", {ptread::ErrorCode::unknown_format, "too short"}},
      {"git-lfs pointer", {ptread::ErrorCode::git_lfs_pointer, "Git LFS pointer"}},
      {"exceeds file size", {ptread::ErrorCode::safetensors_corrupt, "runs past the end of the file"}},
  };
  std::ifstream in(dir + "/SOURCES.tsv");
  std::string line;
  std::getline(in, line);
  size_t count = 0;
  while (std::getline(in, line)) {
    std::vector<std::string> cols;
    std::stringstream ss(line);
    std::string c;
    while (std::getline(ss, c, '\t')) cols.push_back(c);
    REQUIRE(cols.size() >= 7);
    INFO(cols[0] << ": " << cols[6]);
    const auto w = std::find_if(want.begin(), want.end(), [&](const auto& p) { return cols[6].find(p.first) != std::string::npos; });
    REQUIRE(w != want.end());
    for (const ptread::LoadMode mode : kSafetensorsModes) {
      std::vector<unsigned char> keep;
      auto ck = open_in_mode(dir + "/files/" + cols[0], mode, &keep);
      REQUIRE_FALSE(ck.ok());
      CHECK(ck.error().code() == w->second.first);
      CHECK(ck.error().message().find(w->second.second) != std::string::npos);
    }
    ++count;
  }
  CHECK(count >= 3);
}
