// Shared helpers for ptread's tests.
#pragma once

#include <ptread/ptread.hpp>

#include <catch2/catch.hpp>

#include "json.hpp"
#include "platform.hpp"
#include "sha256.hpp"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <sys/stat.h>
#include <vector>

namespace ptread_test {

inline std::string fixture_dir() {
  const char* env = std::getenv("PTREAD_FIXTURES");
  return env && *env ? std::string(env) : std::string(PTREAD_TEST_FIXTURES);
}
inline std::string corpus_dir() { return PTREAD_TEST_CORPUS; }
// The fixtures torch 2.x wrote (tests/fixtures/torch2, gen_torch2.py): always the committed
// ones (PTREAD_FIXTURES, fresh torch 1.13 files, has none of them).
inline std::string torch2_dir() { return std::string(PTREAD_TEST_FIXTURES) + "/torch2"; }
// The adversarial corpus (tests/data/adversarial, written by its make.py).
inline std::string adversarial_dir() { return std::string(PTREAD_TEST_FIXTURES) + "/../data/adversarial"; }

// The json file at path, read once (a test FAILs when it cannot be read).
inline const Json& cached_json(const std::string& path) {
  static std::map<std::string, Json> cache;
  auto it = cache.find(path);
  if (it == cache.end()) {
    Json j;
    std::string err;
    if (!read_json_file(path, j, &err)) FAIL("cannot read " << path << ": " << err);
    it = cache.emplace(path, std::move(j)).first;
  }
  return it->second;
}

// fixtures/expected.json: what torch.load saw in each fixture.
inline const Json& expected_json() { return cached_json(fixture_dir() + "/expected.json"); }

// Every level of the vector kernels this CPU runs, lowest first; IsaRestore puts the best
// level back at the end of a test that forced others (nn_set_isa).
inline std::vector<ptread::detail::NnIsa> isa_levels() {
  using ptread::detail::NnIsa;
  std::vector<NnIsa> v{NnIsa::generic};
  const NnIsa best = ptread::detail::nn_detect_isa();
  if (best >= NnIsa::avx2) v.push_back(NnIsa::avx2);
  if (best >= NnIsa::avx512) v.push_back(NnIsa::avx512);
  return v;
}
struct IsaRestore {
  ~IsaRestore() { ptread::detail::nn_set_isa(ptread::detail::nn_detect_isa()); }
};

// A path under temp_dir() for a test's file, removed at the end of scope.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& name) {
    path = temp_dir() + "/ptread_test_" + std::to_string(test_pid()) + "_" + name;
  }
  ~TempFile() { std::remove(path.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
};

inline bool path_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// The checkpoint files of a folder (.pt .pth .ptl .bin .ckpt .tar), sorted; none when it is
// absent.
inline std::vector<std::string> checkpoint_files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      const auto ends = [&n](const char* s) {
        const std::string x(s);
        return n.size() > x.size() && n.compare(n.size() - x.size(), x.size(), x) == 0;
      };
      if (ends(".pt") || ends(".pth") || ends(".ptl") || ends(".bin") || ends(".ckpt") || ends(".tar")) out.push_back(dir + "/" + n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

inline std::vector<unsigned char> read_file(const std::string& path) {
  std::vector<unsigned char> out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  unsigned char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}

inline bool write_file(const std::string& path, const void* data, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(data, 1, n, f) == n;
  return std::fclose(f) == 0 && ok;
}

// sha256 of the tensor's logical values, C-contiguous, in its own dtype (what the fixture
// generator and the corpus oracle record from torch).
inline std::string tensor_sha256(const ptread::Tensor& t, std::string* err = nullptr) {
  std::vector<unsigned char> buf(static_cast<size_t>(t.nbytes()));
  auto st = t.copy_to(buf.data(), buf.size());
  if (!st) {
    if (err) *err = st.error().str();
    return "copy_to failed";
  }
  return sha256_hex(buf.data(), buf.size());
}

inline std::string shape_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
  return s + "]";
}
inline std::string shape_str(const Json& j) {
  std::string s = "[";
  for (size_t k = 0; k < j.size(); ++k) s += (k ? ", " : "") + std::to_string(j[k].as_int());
  return s + "]";
}

// "[ptread.E403]": how every error message starts.
inline std::string error_tag(ptread::ErrorCode code) {
  char tag[24];
  std::snprintf(tag, sizeof tag, "[ptread.E%03d]", static_cast<int>(code));
  return tag;
}

// A listed tensor against one expected.json entry: name, dtype, shape, value hash.
inline void check_tensor_entry(const ptread::NamedTensor& nt, const Json& e) {
  CHECK(nt.name == e["name"].as_string());
  CHECK(std::string(ptread::dtype_name(nt.tensor.dtype())) == e["dtype"].as_string());
  CHECK(shape_str(nt.tensor.shape()) == shape_str(e["shape"]));
  std::string err;
  CHECK(tensor_sha256(nt.tensor, &err) == e["sha256"].as_string());
  CHECK(err.empty());
}

inline ptread::Result<ptread::Checkpoint> open_in_mode(const std::string& path, ptread::LoadMode mode,
                                                       std::vector<unsigned char>* keep) {
  if (mode == ptread::LoadMode::memory) {
    *keep = read_file(path);
    return ptread::Checkpoint::open_memory(keep->data(), keep->size());
  }
  ptread::Options o;
  o.mode = mode;
  return ptread::Checkpoint::open(path, o);
}

}  // namespace ptread_test
