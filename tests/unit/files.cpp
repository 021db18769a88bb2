// Files that change underneath the reader. mmap mode shares the file's pages: a file
// truncated while mapped raises SIGBUS when a tensor is touched (documented, not tested).
// read mode copies every storage during open() and closes the file, so a later change
// cannot reach the tensors; and a file truncated while it is being read gives an error,
// never a crash. Read mode's storages are filled after the pickle, by one thread or
// several (Options::threads).
#include <catch2/catch.hpp>

#include "support/helpers.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fcntl.h>
#include <iterator>
#include <mutex>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace ptread_test;

namespace {

std::string copy_to_tmp(const std::string& name) {
  const std::string path = temp_dir() + "/ptread-files-" + std::to_string(test_pid()) + "-" + name;
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

TEST_CASE("read mode with several threads reads the bytes mmap mode sees", "[files][threads]") {
  for (const char* name : {"proto2.pt", "dtypes.pt", "legacy_sd.pt", "legacy_views.pt", "train.pt", "many.pt"}) {
    INFO(name);
    const std::string path = fixture_dir() + "/" + name;
    auto mapped = ptread::Checkpoint::open(path);
    REQUIRE(mapped.ok());
    for (unsigned threads : {1u, 2u, 0u}) {
      INFO("threads " << threads);
      ptread::Options o;
      o.mode = ptread::LoadMode::read;
      o.threads = threads;
      auto read = ptread::Checkpoint::open(path, o);
      REQUIRE(read.ok());
      REQUIRE(read->tensors().size() == mapped->tensors().size());
      for (size_t i = 0; i < mapped->tensors().size(); ++i) {
        const auto& a = mapped->tensors()[i];
        const auto& b = read->tensors()[i];
        REQUIRE(a.name == b.name);
        CHECK(b.tensor.storage()->data() != a.tensor.storage()->data());
        CHECK(tensor_sha256(b.tensor) == tensor_sha256(a.tensor));
      }
    }
  }
}

TEST_CASE("storages are filled in pieces by several threads, and a failed piece fails the fill", "[files][threads]") {
  const std::string path = std::string(PTREAD_TEST_FIXTURES) + "/conv/conversions.pt";
  const std::vector<unsigned char> bytes = read_file(path);
  REQUIRE(bytes.size() > 300000);
  auto src = ptread::detail::FileSource::open(path, /*map=*/false);
  REQUIRE(src.ok());
  // Ranges of the file, the last one ending at its end; pieces of 1000 bytes (hundreds of
  // them, claimed by the threads in turn).
  std::vector<uint8_t> out(bytes.size(), 0);
  const size_t cuts[] = {0, 7, 4099, 300001, bytes.size() - 1, bytes.size()};
  std::vector<ptread::detail::FillJob> jobs;
  for (size_t k = 0; k + 1 < std::size(cuts); ++k) jobs.push_back({cuts[k], out.data() + cuts[k], cuts[k + 1] - cuts[k]});
  for (unsigned threads : {1u, 2u, 4u}) {
    std::fill(out.begin(), out.end(), uint8_t{0});
    REQUIRE(ptread::detail::run_fill_jobs(**src, jobs, threads, 1000).ok());
    CHECK(std::memcmp(out.data(), bytes.data(), bytes.size()) == 0);
  }
  // A range past the end of the file: an error, whichever thread reads it.
  std::vector<uint8_t> more(bytes.size() + 5000);
  jobs.push_back({bytes.size() - 10, more.data(), 5000});
  for (unsigned threads : {1u, 2u}) {
    auto st = ptread::detail::run_fill_jobs(**src, jobs, threads, 1000);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code() == ptread::ErrorCode::truncated);
  }
}

TEST_CASE("a path that is not a regular file is refused at once, a named pipe too", "[files]") {
  // A folder is opened by the checkpoint it holds (a sharded set's index, or a single
  // model.safetensors or pytorch_model.bin): an empty one holds none.
  const std::string folder = temp_dir() + "/ptread_files_test_" + std::to_string(test_pid()) + "_empty";
  REQUIRE(make_dir(folder));
  for (ptread::LoadMode mode : {ptread::LoadMode::mmap, ptread::LoadMode::read}) {
    ptread::Options o;
    o.mode = mode;
    INFO(ptread::load_mode_name(mode));
    auto dir = ptread::Checkpoint::open(folder, o);
    REQUIRE_FALSE(dir.ok());
    CHECK(dir.error().code() == ptread::ErrorCode::io_error);
    CHECK(dir.error().str().find("the folder '" + folder + "' holds no model.safetensors.index.json") != std::string::npos);

#if defined(_WIN32)
    // A device (NUL, the null device) opens as a file but is none.
    auto device = ptread::Checkpoint::open("NUL", o);
    REQUIRE_FALSE(device.ok());
    CHECK(device.error().code() == ptread::ErrorCode::io_error);
    CHECK(device.error().str().find("'NUL' is not a regular file") != std::string::npos);
#else
    // A FIFO no one writes to: opening it for reading would wait for a writer. Should the
    // open hang, a helper opens the writing end after a minute (so the test ends) and
    // says it had to.
    const std::string fifo = "/tmp/ptread-fifo-" + std::to_string(::getpid());
    ::unlink(fifo.c_str());
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    std::mutex m;
    std::condition_variable cv;
    bool opened = false, had_to_unblock = false;
    std::thread helper([&] {
      std::unique_lock<std::mutex> lock(m);
      if (cv.wait_for(lock, std::chrono::seconds(60), [&] { return opened; })) return;
      had_to_unblock = true;
      const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (w >= 0) ::close(w);
    });
    auto ck = ptread::Checkpoint::open(fifo, o);
    {
      std::lock_guard<std::mutex> lock(m);
      opened = true;
    }
    cv.notify_all();
    helper.join();
    ::unlink(fifo.c_str());
    CHECK_FALSE(had_to_unblock);
    REQUIRE_FALSE(ck.ok());
    CHECK(ck.error().code() == ptread::ErrorCode::io_error);
    CHECK(ck.error().str().find("is not a regular file") != std::string::npos);
#endif
  }
  remove_path(folder);
}

TEST_CASE("paths are UTF-8: a name beyond ASCII is written, replaced and read", "[files]") {
  // On Windows ptread hands paths to the wide-character calls; the name on disk must be the
  // one the UTF-8 spells (checked through the C library's own wide call), not its bytes read
  // in the ANSI code page.
  const std::string name = "ptread-\xc3\xbc-\xe6\x97\xa5\xe6\x9c\xac-" + std::to_string(test_pid()) + ".pt";  // ü, 日本
  const std::string path = temp_dir() + "/" + name;
  auto src = ptread::Checkpoint::open(fixture_dir() + "/proto2.pt");
  REQUIRE(src.ok());
  const Json& tensors = expected_json()["files"]["proto2.pt"]["tensors"];
  REQUIRE(src->tensors().size() == tensors.size());
#if defined(_WIN32)
  const std::string dir = temp_dir();  // (ASCII)
  const std::wstring wide_path = std::wstring(dir.begin(), dir.end()) + L"/ptread-\u00fc-\u65e5\u672c-" +
                                 std::to_wstring(test_pid()) + L".pt";
#endif
  for (int round = 0; round < 2; ++round) {  // the second save replaces the first file
    INFO("save " << round);
    REQUIRE(ptread::save_pt(path, src->tensors()).ok());
#if defined(_WIN32)
    std::FILE* f = ::_wfopen(wide_path.c_str(), L"rb");
#else
    std::FILE* f = std::fopen(path.c_str(), "rb");
#endif
    CHECK(f != nullptr);
    if (f != nullptr) std::fclose(f);
    for (ptread::LoadMode mode : {ptread::LoadMode::mmap, ptread::LoadMode::read}) {
      INFO(ptread::load_mode_name(mode));
      ptread::Options o;
      o.mode = mode;
      auto ck = ptread::Checkpoint::open(path, o);
      REQUIRE(ck.ok());
      REQUIRE(ck->tensors().size() == tensors.size());
      for (size_t k = 0; k < tensors.size(); ++k) {
        CHECK(ck->tensors()[k].name == tensors[k]["name"].as_string());
        CHECK(tensor_sha256(ck->tensors()[k].tensor) == tensors[k]["sha256"].as_string());
      }
    }
  }
#if defined(_WIN32)
  ::_wremove(wide_path.c_str());
  // Bytes that are not UTF-8 name no file: an error that says so.
  auto bad = ptread::Checkpoint::open(temp_dir() + "/ptread-\xff.pt");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code() == ptread::ErrorCode::io_error);
  CHECK(bad.error().str().find("not a UTF-8 path") != std::string::npos);
#else
  std::remove(path.c_str());
#endif
}
