// The fuzz targets' code (tests/fuzz/targets.hpp) run over every finding saved under
// tests/data/fuzz/ (tools/fuzz.sh copies each one there) and over every fixture, in the
// ordinary suite: under the sanitizer stage a regression is a failure here, without
// libFuzzer. Each input must also either open or fail with a documented error code.
#include <catch2/catch.hpp>

#include "../fuzz/targets.hpp"
#include "support/helpers.hpp"

#include <algorithm>
#include <dirent.h>

using namespace ptread_test;

namespace {

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != ".." && n != "README.md") out.push_back(dir + "/" + n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void replay(const std::string& path) {
  INFO(path);
  const std::vector<unsigned char> bytes = read_file(path);
  const uint8_t* p = bytes.empty() ? nullptr : bytes.data();
  ptread_fuzz::zip_one(p, bytes.size());
  ptread_fuzz::pickle_one(p, bytes.size());
  ptread_fuzz::checkpoint_one(p, bytes.size());
  ptread_fuzz::safetensors_header_one(p, bytes.size());
  auto ck = ptread::Checkpoint::open_memory(p, bytes.size());
  if (!ck) CHECK(std::string(ptread::error_code_name(ck.error().code())) != "unknown_error");
}

}  // namespace

TEST_CASE("fuzz findings and fixtures replay through the fuzz targets", "[fuzz-findings]") {
  const std::string data = std::string(PTREAD_TEST_FIXTURES) + "/../data/fuzz";
  const auto findings = files_in(data);
  for (const auto& f : findings) replay(f);
  size_t fixtures = 0;
  for (const auto& f : files_in(fixture_dir())) {
    if (f.size() > 3 && (f.compare(f.size() - 3, 3, ".pt") == 0 || f.compare(f.size() - 4, 4, ".ptl") == 0)) {
      replay(f);
      ++fixtures;
    }
  }
  CHECK(fixtures >= 30);
  size_t safetensors = 0;
  for (const auto& f : files_in(fixture_dir() + "/safetensors")) {
    if (f.size() > 12 && f.compare(f.size() - 12, 12, ".safetensors") == 0) {
      replay(f);
      ++safetensors;
    }
  }
  CHECK(safetensors >= 40);
  size_t bare = 0;
  for (const auto& f : files_in(fixture_dir() + "/bare")) {
    if (f.size() > 4 && (f.compare(f.size() - 4, 4, ".pkl") == 0 || f.compare(f.size() - 3, 3, ".pt") == 0)) {
      replay(f);
      ++bare;
    }
  }
  CHECK(bare >= 12);
}
