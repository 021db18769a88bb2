// Files that change underneath the reader. mmap mode shares the file's pages: a file
// truncated while mapped raises SIGBUS when a tensor is touched (documented, not tested).
// read mode copies every storage during open() and closes the file, so a later change
// cannot reach the tensors; and a file truncated while it is being read gives an error,
// never a crash.
#include <catch2/catch.hpp>

#include "support/helpers.hpp"

#include <unistd.h>

using namespace ptread_test;

namespace {

std::string copy_to_tmp(const std::string& name) {
  const std::string path = "/tmp/ptread-files-" + std::to_string(::getpid()) + "-" + name;
  const auto bytes = read_file(fixture_dir() + "/" + name);
  REQUIRE(write_file(path, bytes.data(), bytes.size()));
  return path;
}

}  // namespace

TEST_CASE("read mode: tensors survive the file being truncated after open()", "[files]") {
  for (const char* name : {"proto2.pt", "legacy_sd.pt"}) {
    INFO(name);
    const std::string path = copy_to_tmp(name);
    ptread::Options opt;
    opt.mode = ptread::LoadMode::read;
    auto ck = ptread::Checkpoint::open(path, opt);
    REQUIRE(ck.ok());
    REQUIRE(::truncate(path.c_str(), 0) == 0);
    const Json& tensors = expected_json()["files"][name]["tensors"];
    REQUIRE(ck->tensors().size() == tensors.size());
    for (size_t k = 0; k < tensors.size(); ++k) {
      CHECK(tensor_sha256(ck->tensors()[k].tensor) == tensors[k]["sha256"].as_string());
    }
    ::unlink(path.c_str());
  }
}

TEST_CASE("read mode: a file truncated while it is read gives an error, not a crash", "[files]") {
  for (const char* name : {"proto2.pt", "legacy_sd.pt", "legacy_views.pt"}) {
    const std::string path = copy_to_tmp(name);
    const auto size = read_file(path).size();
    // The file is opened (its size taken), then cut before the readers run.
    for (size_t cut : {size / 2, size - 1, size_t{100}}) {
      INFO(name << " cut at " << cut);
      REQUIRE(write_file(path, read_file(fixture_dir() + "/" + name).data(), size));
      auto src = ptread::detail::FileSource::open(path, /*map=*/false);
      REQUIRE(src.ok());
      REQUIRE(::truncate(path.c_str(), static_cast<off_t>(cut)) == 0);
      ptread::detail::ReadOptions ro;
      ro.mode = ptread::LoadMode::read;
      auto m = std::string(name).rfind("legacy", 0) == 0 ? ptread::detail::read_legacy_checkpoint(*src, ro)
                                                         : ptread::detail::read_zip_checkpoint(*src, ro);
      REQUIRE_FALSE(m.ok());
      const ptread::ErrorCode c = m.error().code();
      INFO(m.error().str());
      CHECK((c == ptread::ErrorCode::io_error || c == ptread::ErrorCode::truncated ||
             c == ptread::ErrorCode::pickle_truncated || c == ptread::ErrorCode::zip_corrupt));
    }
    ::unlink(path.c_str());
  }
}
