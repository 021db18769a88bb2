// The zip directory walked beside data.pkl (zip_checkpoint.hpp, read_zip_overlapped): with
// two threads, a checkpoint in memory reads its pickle with placeholder storages while the
// other thread walks the directory, then binds them. The reference is the same file read
// with one thread: every file must leave the same Model both ways (the tree, specs,
// storages with the byte of the source each one starts at, names), or fail with the same
// error text, whether the overlap was kept or dropped for the plain path. The storages are
// bound by the pickle's thread when the walk ended first, else after both tasks: these
// tests take both ways (which one is the threads' timing); tools/test.sh runs them under
// ThreadSanitizer too.
#include <catch2/catch.hpp>

#include "support/helpers.hpp"
#include "support/model_dump.hpp"
#include "support/zip_writer.hpp"

#include <memory>
#include <string>
#include <vector>

using namespace ptread_test;

namespace {

using Bytes = std::vector<uint8_t>;

struct Read {
  std::string text;  // the Model's dump, or the error
  bool overlapped = false;
};

// A zip checkpoint read as open_memory reads it, with `threads` threads.
Read read_zip(const Bytes& file, unsigned threads, bool overlap = true) {
  auto src = std::make_shared<ptread::detail::MemorySource>(file.data(), file.size(), "<test>");
  ptread::detail::ReadOptions ro;
  ro.mode = ptread::LoadMode::memory;
  ro.threads = threads;
  ro.overlap = overlap;
  auto model = ptread::detail::read_zip_checkpoint(src, ro);
  if (!model) return {model.error().str(), false};
  return {ModelDump(**model).source(file.data(), file.size()).all(), (*model)->overlapped};
}

// The file opened as a user would, with two threads.
ptread::Result<ptread::Checkpoint> open_two_threads(const Bytes& file) {
  ptread::Options o;
  o.threads = 2;
  return ptread::Checkpoint::open_memory(file.data(), file.size(), o);
}

bool is_zip(const Bytes& b) { return b.size() >= 4 && b[0] == 'P' && b[1] == 'K' && b[2] == 3 && b[3] == 4; }

// A state dict of three float32 tensors in torch's layout: data.pkl first, then data/0..2
// (64-byte aligned, 16 bytes each), then version; the cases below edit the records.
struct Record {
  std::string name;
  Bytes data;
  bool deflate = false;
};
// {'a': t(4), 'b': t(4) in storage key1, 'c': t(4)}, each _rebuild_tensor_v2 of a
// ('storage', FloatStorage, key, 'cpu', 4) persistent id; with count > 3, tensors
// 't3' ... in storages "3" ... follow.
Bytes state_dict_pickle(const char* key1 = "1", int count = 3) {
  Bytes p = {0x80, 2, '}', '('};
  auto str = [&p](const std::string& s) {
    p.push_back('X');
    for (int k = 0; k < 4; ++k) p.push_back(static_cast<uint8_t>(s.size() >> (8 * k)));
    p.insert(p.end(), s.begin(), s.end());
  };
  auto raw = [&p](const std::string& s) { p.insert(p.end(), s.begin(), s.end()); };
  for (int t = 0; t < count; ++t) {
    const std::string key = t == 1 ? std::string(key1) : std::to_string(t);
    str(t < 3 ? std::string(1, static_cast<char>('a' + t)) : "t" + std::to_string(t));
    raw("ctorch._utils\n_rebuild_tensor_v2\n");
    p.push_back('(');
    p.push_back('(');
    str("storage");
    raw("ctorch\nFloatStorage\n");
    str(key);
    str("cpu");
    p.push_back('K'), p.push_back(4);
    p.push_back('t');
    p.push_back('Q');
    p.push_back('K'), p.push_back(0);
    p.push_back('K'), p.push_back(4), p.push_back(0x85);
    p.push_back('K'), p.push_back(1), p.push_back(0x85);
    p.push_back(0x89);
    raw("ccollections\nOrderedDict\n");
    p.push_back(')'), p.push_back('R');
    p.push_back('t'), p.push_back('R');
  }
  p.push_back('u');
  p.push_back('.');
  return p;
}
std::vector<Record> state_dict_records(int count = 3) {
  std::vector<Record> r;
  r.push_back({"archive/data.pkl", state_dict_pickle("1", count)});
  for (int k = 0; k < count; ++k) {
    Bytes d(16);
    for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(16 * k + static_cast<int>(i));
    r.push_back({"archive/data/" + std::to_string(k), d});
  }
  r.push_back({"archive/version", {'3', '\n'}});
  return r;
}
Bytes zip_of(const std::vector<Record>& records) {
  ZipWriter w;
  for (const Record& r : records) {
    ZipEntrySpec e;
    e.name = r.name;
    e.data = r.data;
    e.method = r.deflate ? 8 : 0;
    w.add(std::move(e));
  }
  return w.build().flat();
}

}  // namespace

TEST_CASE("overlap: every zip fixture, corpus and adversarial file reads the same with one and two threads", "[overlap]") {
  std::vector<std::string> files = checkpoint_files(fixture_dir());
  for (const std::string& f : checkpoint_files(corpus_dir() + "/files")) files.push_back(f);
  for (const std::string& f : checkpoint_files(adversarial_dir())) files.push_back(f);
  size_t zips = 0, overlapped = 0, dropped = 0;
  for (const std::string& path : files) {
    const Bytes file = read_file(path);
    if (!is_zip(file)) continue;
    INFO(path);
    ++zips;
    const Read one = read_zip(file, 1), two = read_zip(file, 2), off = read_zip(file, 2, false);
    CHECK(!one.overlapped);
    CHECK(!off.overlapped);
    CHECK(two.text == one.text);
    CHECK(off.text == one.text);
    (two.overlapped ? overlapped : dropped) += 1;
  }
  INFO(zips << " zip files: " << overlapped << " read with the overlap, " << dropped << " without");
  // Both ways are taken: torch's own files overlap, hostile and unusual ones fall back.
  CHECK(zips >= 100);
  CHECK(overlapped >= 45);
  CHECK(dropped >= 40);
}

TEST_CASE("overlap: the plain case binds each storage to its own record", "[overlap]") {
  const Bytes file = zip_of(state_dict_records());
  const Read one = read_zip(file, 1), two = read_zip(file, 2);
  REQUIRE(two.overlapped);
  REQUIRE(two.text == one.text);
  auto ck = open_two_threads(file);
  REQUIRE(ck.ok());
  REQUIRE(ck->tensors().size() == 3);
  for (int t = 0; t < 3; ++t) {
    const ptread::Tensor* x = ck->find(std::string(1, static_cast<char>('a' + t)));
    REQUIRE(x != nullptr);
    const auto* b = static_cast<const uint8_t*>(x->data_ptr());
    for (int i = 0; i < 16; ++i) CHECK(b[i] == 16 * t + i);
  }
}

TEST_CASE("overlap: a pickle of megabytes, its graph in chunks the walking thread faults in", "[overlap]") {
  // 30,000 tensors: 3.4 MB of pickle, so the pickle's thread takes its graph's and memo's
  // 2 MiB chunks from a ChunkReserve that the other thread fills after the walk.
  const Bytes file = zip_of(state_dict_records(30000));
  const Read one = read_zip(file, 1), two = read_zip(file, 2);
  REQUIRE(two.overlapped);
  CHECK(two.text == one.text);
  auto ck = open_two_threads(file);
  REQUIRE(ck.ok());
  REQUIRE(ck->tensor_count() == 30000);
  const ptread::Tensor* x = ck->find("t29999");
  REQUIRE(x != nullptr);
  const auto* b = static_cast<const uint8_t*>(x->data_ptr());
  CHECK(b[0] == static_cast<uint8_t>(16 * 29999));
  CHECK(b[15] == static_cast<uint8_t>(16 * 29999 + 15));
}

TEST_CASE("overlap: the directory walk calls its tick every 1,024 records and walks the same", "[overlap]") {
  // read_zip_overlapped tops the chunk reserve up from the tick while the walk runs.
  const Bytes file = zip_of(state_dict_records(3000));  // 3,002 records: data.pkl, data/0..2999, version
  auto walk = [&file](size_t* ticks, ptread::detail::ZipWalk& w) {
    auto src = std::make_shared<ptread::detail::MemorySource>(file.data(), file.size(), "<test>");
    auto zip = ptread::detail::ZipArchive::locate(src, ptread::Limits());
    REQUIRE(zip.ok());
    REQUIRE(zip->record_count() == 3002);
    const ptread::Status s = ticks != nullptr ? ptread::detail::walk_zip(*zip, w, [ticks] { ++*ticks; })
                                              : ptread::detail::walk_zip(*zip, w);
    REQUIRE(s.ok());
    return zip->entries().size();
  };
  size_t ticks = 0;
  ptread::detail::ZipWalk ticked, plain;
  const size_t kept_ticked = walk(&ticks, ticked), kept_plain = walk(nullptr, plain);
  CHECK(ticks == 2);  // after records 1,024 and 2,048
  CHECK(kept_ticked == kept_plain);
  CHECK(ticked.data_records == 3000);
  CHECK(plain.data_records == 3000);
  REQUIRE(ticked.data_by_number.size() == plain.data_by_number.size());
  for (size_t n = 0; n < plain.data_by_number.size(); ++n) {
    CHECK(ticked.data_by_number[n].data == plain.data_by_number[n].data);
    CHECK(ticked.data_by_number[n].size == plain.data_by_number[n].size);
  }
}

TEST_CASE("overlap: files the overlap cannot bind are read after the walk, with the plain path's result", "[overlap]") {
  struct Case {
    const char* what;
    std::vector<Record> records;
    bool overlapped;
  };
  std::vector<Case> cases;
  cases.push_back({"torch's layout", state_dict_records(), true});
  {
    auto r = state_dict_records();
    std::swap(r[0], r.back());  // version first: no data.pkl to start on
    cases.push_back({"data.pkl not first", r, false});
  }
  {
    auto r = state_dict_records();
    r[2].data.resize(8);  // data/1 holds 8 bytes of the 16 declared
    cases.push_back({"a record smaller than declared", r, false});
  }
  {
    auto r = state_dict_records();
    r[2].data.resize(32);  // larger: bound as the plain path binds it (its whole size)
    cases.push_back({"a record larger than declared", r, true});
  }
  {
    auto r = state_dict_records();
    r.erase(r.begin() + 2);
    cases.push_back({"a record missing", r, false});
  }
  {
    auto r = state_dict_records();
    r[2].deflate = true;
    cases.push_back({"a deflated record", r, false});
  }
  {
    auto r = state_dict_records();
    r[0].data = state_dict_pickle("x1");
    r[2].name = "archive/data/x1";
    cases.push_back({"a key that is no number (found by name)", r, true});
    r[2].deflate = true;
    cases.push_back({"a key that is no number, its record deflated", r, false});
    r[2].name = "archive/data/x2";
    r[2].deflate = false;
    cases.push_back({"a key that is no number, its record missing", r, false});
    r[0].data = state_dict_pickle("140507856646496");  // torch's older pointer-like keys
    r[2].name = "archive/data/140507856646496";
    cases.push_back({"a pointer-like key", r, true});
    r[2].data.resize(8);
    cases.push_back({"a pointer-like key, its record smaller than declared", r, false});
  }
  {
    auto r = state_dict_records();
    r.push_back({"archive/byteorder", {'b', 'i', 'g'}});
    cases.push_back({"a big-endian byte order record", r, false});
  }
  {
    auto r = state_dict_records();
    r.push_back({"data.pkl", state_dict_pickle()});  // shallower: this one is the checkpoint's
    cases.push_back({"a shallower data.pkl later", r, false});
  }
  {
    auto r = state_dict_records();
    r.push_back({"archive/byteorder", {'s', 'i', 'd', 'e'}});
    cases.push_back({"a byte order record the walk refuses", r, false});
  }
  for (const Case& c : cases) {
    INFO(c.what);
    const Bytes file = zip_of(c.records);
    const Read one = read_zip(file, 1), two = read_zip(file, 2);
    CHECK(two.text == one.text);
    CHECK(two.overlapped == c.overlapped);
  }
}
