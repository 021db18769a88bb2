// The zip container: the records of tests/fixtures/buffer.pt re-packed with the test zip
// writer in every layout the reader must handle (torch's descriptors and padding, classic
// zip, forced ZIP64, prefixes, comments, deflate, records past 4 GiB in a sparse file) must
// read as the original does; broken archives give the error that names what is wrong.
#include <catch2/catch.hpp>

#include "support/helpers.hpp"
#include "support/zip_writer.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace ptread_test;
using ptread::ErrorCode;
using ptread::LoadMode;

namespace {

// ---------------------------------------------------------------------------------------
// The payload: buffer.pt's records, read once with ptread's own ZipArchive (the container
// under test is the synthetic one), and what expected.json says they hold.

struct Records {
  std::vector<uint8_t> pkl, version;
  std::vector<std::vector<uint8_t>> data;  // data/0 (F32 w), data/1 (F32 b), data/2 (I64 n)
};

const Records& records() {
  static Records r;
  static bool loaded = false;
  if (!loaded) {
    const std::string path = fixture_dir() + "/buffer.pt";
    const std::vector<unsigned char> file = read_file(path);
    REQUIRE(!file.empty());
    auto src = std::make_shared<ptread::detail::MemorySource>(file.data(), file.size(), path);
    auto zip = ptread::detail::ZipArchive::open(src, ptread::Limits{});
    REQUIRE(zip.ok());
    auto get = [&zip](const std::string& name) {
      const ptread::detail::ZipEntry* e = zip->find(name);
      INFO("record " << name << " of buffer.pt");
      REQUIRE(e != nullptr);
      auto b = zip->read(*e);
      REQUIRE(b.ok());
      return std::vector<uint8_t>(b->data, b->data + b->size);
    };
    r.pkl = get("archive/data.pkl");
    r.version = get("archive/version");
    for (int k = 0; k < 3; ++k) r.data.push_back(get("archive/data/" + std::to_string(k)));
    REQUIRE(r.data[0].size() == 24);  // 2x3 float32
    REQUIRE(r.data[1].size() == 8);   // 2 float32
    REQUIRE(r.data[2].size() == 24);  // 3 int64
    loaded = true;
  }
  return r;
}

const Json& buffer_expected() {
  return expected_json()["files"]["buffer.pt"];
}

// The checkpoint's records under `prefix`, torch's layout by default (descriptors, zero
// local sizes, 'FB' padding, ZIP64 EOCD + locator).
ZipWriter checkpoint_writer(const std::string& prefix = "archive/") {
  const Records& r = records();
  ZipWriter w;
  w.add(prefix + "data.pkl", r.pkl);
  for (size_t k = 0; k < r.data.size(); ++k) w.add(prefix + "data/" + std::to_string(k), r.data[k]);
  w.add(prefix + "version", r.version);
  return w;
}

ZipEntrySpec& spec(ZipWriter& w, const std::string& name) {
  for (auto& s : w.specs()) {
    if (s.name == name) return s;
  }
  FAIL("no record " << name << " in the writer");
  return w.specs().front();
}

const ZipEntryLayout& layout(const ZipBuilt& z, const std::string& name) {
  for (const auto& e : z.entries) {
    if (e.name == name) return e;
  }
  FAIL("no record " << name << " in the built archive");
  return z.entries.front();
}

// Fixture `name` again, every record stored, its data.pkl with a FRAME of `length` bytes
// put after its PROTO opcode.
std::vector<uint8_t> framed_fixture(const std::string& name, uint64_t length) {
  const std::vector<unsigned char> file = read_file(fixture_dir() + "/" + name);
  REQUIRE(!file.empty());
  auto src = std::make_shared<ptread::detail::MemorySource>(file.data(), file.size(), name);
  auto zip = ptread::detail::ZipArchive::open(src, ptread::Limits{});
  REQUIRE(zip.ok());
  ZipWriter w;
  bool framed = false;
  for (const auto& e : zip->entries()) {
    auto b = zip->read(e);
    REQUIRE(b.ok());
    std::vector<uint8_t> bytes(b->data, b->data + b->size);
    const std::string record(e.name);
    if (record.size() > 9 && record.compare(record.size() - 9, 9, "/data.pkl") == 0) {
      REQUIRE(bytes.size() > 2);
      REQUIRE(bytes[0] == 0x80);  // PROTO
      std::vector<uint8_t> frame = {0x95};
      for (int k = 0; k < 8; ++k) frame.push_back(static_cast<uint8_t>(length >> (8 * k)));
      bytes.insert(bytes.begin() + 2, frame.begin(), frame.end());
      framed = true;
    }
    w.add(record, bytes);
  }
  REQUIRE(framed);
  return w.build().flat();
}

ptread::Result<ptread::Checkpoint> open_mem(const std::vector<uint8_t>& file, const ptread::Options& o = {}) {
  return ptread::Checkpoint::open_memory(file.data(), file.size(), o);
}

// Names, dtypes, shapes and value hashes as torch wrote them into buffer.pt.
void check_like_buffer(const ptread::Result<ptread::Checkpoint>& ck, const std::string& prefix) {
  if (!ck.ok()) FAIL("open failed: " << ck.error().str());
  CHECK(ck->archive_prefix() == prefix);
  CHECK(std::string(ck->format_name()) == "zip");
  const Json& tensors = buffer_expected()["tensors"];
  REQUIRE(tensors.size() == 3);
  REQUIRE(ck->tensors().size() == tensors.size());
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Json& e = tensors[k];
    const auto& nt = ck->tensors()[k];
    INFO("tensor " << k << " '" << e["name"].as_string() << "'");
    check_tensor_entry(nt, e);
  }
  CHECK(ck->find("w") != nullptr);
}

void check_error(const ptread::Error& e, ErrorCode want, const std::string& needle = "") {
  INFO("error: " << e.str());
  CHECK(e.code() == want);
  CHECK(e.str().rfind(error_tag(want), 0) == 0);
  if (!needle.empty()) CHECK(e.str().find(needle) != std::string::npos);
}

template <class R>
void check_fails(const R& r, ErrorCode want, const std::string& needle = "") {
  REQUIRE_FALSE(r.ok());
  check_error(r.error(), want, needle);
}

bool inside(const void* p, const std::vector<uint8_t>& buf) {
  const auto* q = static_cast<const uint8_t*>(p);
  return q >= buf.data() && q < buf.data() + buf.size();
}
size_t offset_in(const void* p, const std::vector<uint8_t>& buf) {
  return static_cast<size_t>(static_cast<const uint8_t*>(p) - buf.data());
}


std::vector<uint8_t> byteswapped(std::vector<uint8_t> v, size_t unit) {
  for (size_t k = 0; k + unit <= v.size(); k += unit) std::reverse(v.begin() + static_cast<std::ptrdiff_t>(k), v.begin() + static_cast<std::ptrdiff_t>(k + unit));
  return v;
}

ptread::Result<ptread::detail::ZipArchive> open_zip(const std::vector<uint8_t>& file, const ptread::Limits& limits = {}) {
  auto src = std::make_shared<ptread::detail::MemorySource>(file.data(), file.size(), "<zip>");
  return ptread::detail::ZipArchive::open(src, limits);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// 0. The writer itself writes what the tests rely on.

TEST_CASE("zip writer: CRC-32 and the torch layout", "[zip]") {
  CHECK(crc32_of(to_bytes("123456789")) == 0xCBF43926u);
  CHECK(crc32_of(to_bytes("")) == 0u);
  ZipWriter w = checkpoint_writer();
  const ZipBuilt z = w.build();
  const std::vector<uint8_t> f = z.flat();
  for (const auto& e : z.entries) {
    INFO(e.name);
    CHECK(e.data_offset % 64 == 0);
    CHECK(ptread::detail::le32(&f[static_cast<size_t>(e.local_offset)]) == 0x04034b50u);
    CHECK(ptread::detail::le32(&f[static_cast<size_t>(e.local_offset) + 18]) == 0u);  // local csize
    CHECK(ptread::detail::le32(&f[static_cast<size_t>(e.local_offset) + 22]) == 0u);  // local usize
    CHECK(ptread::detail::le32(&f[static_cast<size_t>(e.data_offset + e.data_size)]) == 0x08074b50u);
  }
  REQUIRE(z.zip64_eocd_offset != UINT64_MAX);
  CHECK(ptread::detail::le32(&f[static_cast<size_t>(z.zip64_eocd_offset)]) == 0x06064b50u);
  CHECK(ptread::detail::le32(&f[static_cast<size_t>(z.locator_offset)]) == 0x07064b50u);
  CHECK(z.eocd_offset + 22 == z.size);
}

// ---------------------------------------------------------------------------------------
// 1. Torch's own layout; stored records are 64-byte aligned views into the caller's memory.

TEST_CASE("zip: torch layout (descriptors, zero local sizes, FB padding, ZIP64 EOCD) reads zero-copy", "[zip]") {
  ZipWriter w = checkpoint_writer();
  const ZipBuilt z = w.build();
  const std::vector<uint8_t> file = z.flat();
  auto ck = open_mem(file);
  check_like_buffer(ck, "archive/");
  REQUIRE(ck.ok());
  for (const auto& nt : ck->tensors()) {
    INFO(nt.name);
    const void* p = nt.tensor.data_ptr();
    REQUIRE(inside(p, file));  // a view: no copy was made
    CHECK(offset_in(p, file) % 64 == 0);
  }
  // The view is the record's own bytes.
  CHECK(offset_in(ck->find("w")->data_ptr(), file) == layout(z, "archive/data/0").data_offset);
  CHECK(offset_in(ck->find("n")->data_ptr(), file) == layout(z, "archive/data/2").data_offset);

  SECTION("mmap and read mode from a file") {
    TempFile tmp("torch_layout.pt");
    REQUIRE(write_file(tmp.path, file.data(), file.size()));
    for (auto mode : {LoadMode::mmap, LoadMode::read}) {
      INFO("mode " << ptread::load_mode_name(mode));
      ptread::Options o;
      o.mode = mode;
      auto fck = ptread::Checkpoint::open(tmp.path, o);
      check_like_buffer(fck, "archive/");
      REQUIRE(fck.ok());
      for (const auto& nt : fck->tensors()) {
        CHECK(reinterpret_cast<uintptr_t>(nt.tensor.data_ptr()) % 64 == 0);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// 2. Classic zip: sizes in local headers, no descriptors, no ZIP64 records.

TEST_CASE("zip: classic layout (local sizes, no descriptors, no padding, no ZIP64)", "[zip]") {
  ZipWriter w = checkpoint_writer();
  w.zip64_eocd = false;
  w.utf8_flag = false;
  for (auto& s : w.specs()) {
    s.descriptor = false;
    s.pad64 = false;
  }
  const ZipBuilt z = w.build();
  REQUIRE(z.zip64_eocd_offset == UINT64_MAX);
  const std::vector<uint8_t> file = z.flat();
  // Nothing of ZIP64 anywhere, and sizes really sit in the local headers.
  const uint8_t sig[4] = {'P', 'K', 6, 6};
  CHECK(std::search(file.begin(), file.end(), sig, sig + 4) == file.end());
  const auto& d0 = layout(z, "archive/data/0");
  CHECK(ptread::detail::le32(&file[static_cast<size_t>(d0.local_offset) + 18]) == 24u);
  check_like_buffer(open_mem(file), "archive/");

  SECTION("local sizes are never trusted: wrong ones change nothing") {
    std::vector<uint8_t> f = file;
    for (const auto& e : z.entries) {
      put32(f, static_cast<size_t>(e.local_offset) + 18, 0x7fffffffu);
      put32(f, static_cast<size_t>(e.local_offset) + 22, 3);
    }
    check_like_buffer(open_mem(f), "archive/");
  }
  SECTION("unpadded stored records: views where their place suits the dtype, aligned copies elsewhere") {
    auto ck = open_mem(file);
    REQUIRE(ck.ok());
    const auto* p = static_cast<const uint8_t*>(ck->find("w")->data_ptr());
    CHECK(reinterpret_cast<uintptr_t>(p) % alignof(float) == 0);  // data<float>() is a valid pointer
    CHECK(std::memcmp(p, &file[static_cast<size_t>(d0.data_offset)], 24) == 0);
    if ((reinterpret_cast<uintptr_t>(file.data()) + d0.data_offset) % alignof(float) == 0) {
      CHECK(offset_in(p, file) == d0.data_offset);
    } else {
      CHECK_FALSE(inside(p, file));
    }
  }
}

// ---------------------------------------------------------------------------------------
// 3. ZIP64 extra fields forced for sizes and offsets.

TEST_CASE("zip: forced ZIP64 extra fields for sizes and offsets", "[zip]") {
  struct Variant {
    const char* what;
    bool sizes, offsets, eocd64, descriptor;
  };
  const Variant variants[] = {
      {"sizes+offsets, ZIP64 EOCD, descriptors", true, true, true, true},
      {"sizes+offsets, no ZIP64 EOCD, descriptors", true, true, false, true},
      {"sizes+offsets, ZIP64 EOCD, local sizes", true, true, true, false},
      {"sizes+offsets, no ZIP64 EOCD, local sizes", true, true, false, false},
      {"sizes only", true, false, true, true},
      {"offsets only", false, true, false, false},  // refused: torch (miniz) refuses it
  };
  for (const Variant& v : variants) {
    INFO(v.what);
    ZipWriter w = checkpoint_writer();
    w.zip64_eocd = v.eocd64;
    for (auto& s : w.specs()) {
      s.zip64_sizes = v.sizes;
      s.zip64_offset = v.offsets;
      s.descriptor = v.descriptor;
    }
    const ZipBuilt z = w.build();
    const std::vector<uint8_t> file = z.flat();
    // The central fields really are 0xFFFFFFFF, the values come from the extra.
    for (const auto& e : z.entries) {
      const size_t c = static_cast<size_t>(e.central_offset);
      CHECK(ptread::detail::le32(&file[c + 20]) == (v.sizes ? 0xffffffffu : e.data_size));
      CHECK(ptread::detail::le32(&file[c + 42]) == (v.offsets ? 0xffffffffu : e.local_offset));
    }
    if (v.offsets && !v.sizes) {
      // miniz checks the 32-bit offset + 30 + compressed size against the file's size when
      // the compressed size is no placeholder: 0xFFFFFFFF fails it in a file under 4 GiB
      // (torch.load refuses such a file: tests/data/adversarial/zip64_offset_in_small_file.pt).
      check_fails(open_mem(file), ErrorCode::zip_record_out_of_bounds, "0xFFFFFFFF");
      continue;
    }
    auto zip = open_zip(file);
    REQUIRE(zip.ok());
    REQUIRE(zip->entries().size() == z.entries.size());
    for (size_t k = 0; k < z.entries.size(); ++k) {
      CHECK(zip->entries()[k].name == z.entries[k].name);
      CHECK(zip->entries()[k].local_header_offset == z.entries[k].local_offset);
      CHECK(zip->entries()[k].compressed_size == z.entries[k].data_size);
      CHECK(zip->entries()[k].uncompressed_size == z.entries[k].data_size);
    }
    auto ck = open_mem(file);
    check_like_buffer(ck, "archive/");
    if (ck.ok()) CHECK(offset_in(ck->find("b")->data_ptr(), file) == layout(z, "archive/data/1").data_offset);
  }
}

// ---------------------------------------------------------------------------------------
// 4. The archive prefix is the folder holding the shallowest data.pkl.

TEST_CASE("zip: archive prefixes", "[zip]") {
  for (const char* prefix : {"archive/", "my model v2/", "a/b/", "model.pt/", ""}) {
    INFO("prefix '" << prefix << "'");
    ZipWriter w = checkpoint_writer(prefix);
    auto file = w.build().flat();
    check_like_buffer(open_mem(file), prefix);
  }
  SECTION("root-level records") {
    ZipWriter w = checkpoint_writer("");
    const ZipBuilt z = w.build();
    CHECK(z.entries.front().name == "data.pkl");
    CHECK(z.entries[1].name == "data/0");
  }
  SECTION("the shallowest data.pkl wins, whatever the order") {
    for (bool deep_first : {false, true}) {
      INFO("deep_first " << deep_first);
      ZipWriter w;
      ZipWriter real = checkpoint_writer("x/");
      ZipEntrySpec decoy;
      decoy.name = "x/y/data.pkl";
      decoy.data = to_bytes("not a pickle");
      if (deep_first) w.add(decoy);
      for (const auto& s : real.specs()) w.add(s);
      if (!deep_first) w.add(decoy);
      ZipEntrySpec other;  // a name that only ends like data.pkl
      other.name = "mydata.pkl";
      other.data = to_bytes("not a pickle either");
      w.add(other);
      auto file = w.build().flat();
      check_like_buffer(open_mem(file), "x/");
    }
  }
  SECTION("records of another folder are not used") {
    // data.pkl under x/, its storages only under y/: the storages are missing.
    ZipWriter w = checkpoint_writer("x/");
    for (auto& s : w.specs()) {
      if (s.name.rfind("x/data/", 0) == 0) s.name = "y/" + s.name.substr(2);
    }
    auto file = w.build().flat();
    check_fails(open_mem(file), ErrorCode::record_missing, "x/data/0");
  }
}

// ---------------------------------------------------------------------------------------
// 4b. Storage records in any order. The reader takes the numbered records that follow the
// first data.pkl out of the directory as it walks it (no ZipEntry each) and finds the rest
// afterwards: whatever the order, every load mode reads the same, and of two records with
// one name the first in the directory wins (as ZipArchive::find has it).

namespace {

// buffer.pt's records in the order `order` gives: names relative to "archive/".
ZipWriter ordered_writer(const std::vector<std::string>& order) {
  const Records& r = records();
  ZipWriter w;
  for (const std::string& n : order) {
    if (n == "data.pkl") w.add("archive/data.pkl", r.pkl);
    if (n == "version") w.add("archive/version", r.version);
    if (n.rfind("data/", 0) == 0) w.add("archive/" + n, r.data[static_cast<size_t>(std::stoi(n.substr(5)))]);
  }
  return w;
}

// Opens file every way there is (open_memory; from disk in mmap and read mode) and checks
// it reads as buffer.pt; from memory, without copies.
void check_every_mode(const std::vector<uint8_t>& file, const char* what) {
  INFO(what);
  auto ck = open_mem(file);
  check_like_buffer(ck, "archive/");
  if (ck.ok()) {
    for (const auto& nt : ck->tensors()) CHECK(inside(nt.tensor.data_ptr(), file));
  }
  TempFile tmp("order.pt");
  REQUIRE(write_file(tmp.path, file.data(), file.size()));
  for (auto mode : {LoadMode::mmap, LoadMode::read}) {
    INFO("from a file, mode " << ptread::load_mode_name(mode));
    ptread::Options o;
    o.mode = mode;
    check_like_buffer(ptread::Checkpoint::open(tmp.path, o), "archive/");
  }
}

}  // namespace

TEST_CASE("zip: storage records in any order; of equal names the first wins", "[zip]") {
  const std::vector<std::vector<std::string>> orders = {
      {"data.pkl", "data/0", "data/1", "data/2", "version"},  // torch's
      {"data/0", "data/1", "data/2", "data.pkl", "version"},  // every storage before data.pkl
      {"data/1", "data.pkl", "version", "data/2", "data/0"},  // some before, some after
      {"version", "data/2", "data/0", "data/1", "data.pkl"},
  };
  for (const auto& order : orders) {
    std::string what = "order:";
    for (const auto& n : order) what += " " + n;
    check_every_mode(ordered_writer(order).build().flat(), what.c_str());
  }
  SECTION("a second record of a name is never read") {
    // data/1 twice: buffer.pt's bytes first, then 4 bytes of 0xff (were they read, the
    // 8-byte storage would be too small), in each place before and after data.pkl.
    for (int first_at : {0, 1, 3}) {
      for (int second_at : {1, 2, 4, 5}) {
        if (second_at <= first_at) continue;
        std::vector<std::string> order = {"data.pkl", "data/0", "data/2", "version"};
        order.insert(order.begin() + first_at, "data/1");
        ZipWriter w = ordered_writer(order);
        ZipEntrySpec dup;
        dup.name = "archive/data/1";
        dup.data = std::vector<uint8_t>(4, 0xff);
        w.specs().insert(w.specs().begin() + second_at, dup);
        const ZipBuilt z = w.build();
        std::string what = "data/1 at " + std::to_string(first_at) + " and " + std::to_string(second_at) + ":";
        for (const auto& e : z.entries) what += " " + e.name;
        check_every_mode(z.flat(), what.c_str());
      }
    }
  }
#if PTREAD_WITH_ZLIB
  SECTION("the first record of a name deflated, a stored one after it") {
    for (bool before_pkl : {false, true}) {
      ZipWriter w = ordered_writer(before_pkl ? std::vector<std::string>{"data/1", "data.pkl", "data/0", "data/2"}
                                              : std::vector<std::string>{"data.pkl", "data/1", "data/0", "data/2"});
      spec(w, "archive/data/1").method = 8;
      ZipEntrySpec dup;
      dup.name = "archive/data/1";
      dup.data = std::vector<uint8_t>(4, 0xff);
      w.add(dup);
      const auto file = w.build().flat();
      INFO("deflated data/1 " << (before_pkl ? "before" : "after") << " data.pkl");
      auto ck = open_mem(file);
      check_like_buffer(ck, "archive/");
      if (ck.ok()) CHECK_FALSE(inside(ck->find("b")->data_ptr(), file));  // inflated
    }
  }
#endif
  SECTION("a storage named by data.pkl is missing, with the others taken out by the walk") {
    const auto file = ordered_writer({"data.pkl", "data/0", "data/2", "version"}).build().flat();
    check_fails(open_mem(file), ErrorCode::record_missing, "archive/data/1");
  }
  SECTION("a storage smaller than data.pkl says, taken out by the walk") {
    ZipWriter w = ordered_writer({"data.pkl", "data/0", "data/1", "data/2"});
    spec(w, "archive/data/1").data.resize(4);
    const auto file = w.build().flat();
    check_fails(open_mem(file), ErrorCode::storage_too_small, "'archive/data/1' holds 4 bytes");
    TempFile tmp("small.pt");
    REQUIRE(write_file(tmp.path, file.data(), file.size()));
    for (auto mode : {LoadMode::mmap, LoadMode::read}) {
      ptread::Options o;
      o.mode = mode;
      check_fails(ptread::Checkpoint::open(tmp.path, o), ErrorCode::storage_too_small, "'archive/data/1' holds 4 bytes");
    }
  }
}

TEST_CASE("zip: ZipArchive::open with a filter keeps only what it returns true for", "[zip]") {
  ZipWriter w = checkpoint_writer();
  const ZipBuilt z = w.build();
  const auto file = z.flat();
  auto src = std::make_shared<ptread::detail::MemorySource>(file.data(), file.size(), "<zip>");
  std::vector<std::string> seen;
  std::vector<size_t> index_then;
  auto zip = ptread::detail::ZipArchive::open(src, ptread::Limits{},
                                              [&](const ptread::detail::ZipArchive& a, const ptread::detail::ZipEntry& e) {
                                                seen.emplace_back(e.name);
                                                index_then.push_back(a.entries().size());
                                                CHECK(a.record_count() == 5);
                                                uint64_t off = 0;
                                                CHECK(a.try_data_offset(e, &off));
                                                CHECK(off == layout(z, std::string(e.name)).data_offset);
                                                return e.name.find("/data/") == std::string_view::npos;
                                              });
  REQUIRE(zip.ok());
  CHECK(seen == std::vector<std::string>{"archive/data.pkl", "archive/data/0", "archive/data/1", "archive/data/2",
                                         "archive/version"});
  CHECK(index_then == std::vector<size_t>{0, 1, 1, 1, 1});
  CHECK(zip->record_count() == 5);
  REQUIRE(zip->entries().size() == 2);
  CHECK(zip->entries()[0].name == "archive/data.pkl");
  CHECK(zip->entries()[1].name == "archive/version");
  CHECK(zip->find("archive/data/0") == nullptr);
  CHECK(zip->find("archive/version") == &zip->entries()[1]);
}

// A large directory and dense records: a mapped file's walk reads them through the file a
// window at a time (FileWindow), with the same result as reading them where they lie.

TEST_CASE("zip: FileWindow gives the source's bytes, read through the file while it is open", "[zip]") {
  using ptread::detail::FileWindow;
  std::vector<uint8_t> bytes(3 * FileWindow::kBytes + 123);
  for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<uint8_t>(k * 131 + (k >> 9));
  TempFile f("file_window.bin");
  REQUIRE(write_file(f.path, bytes.data(), bytes.size()));
  auto src = ptread::detail::FileSource::open(f.path, /*map=*/true);
  REQUIRE(src.ok());
  const uint8_t* base = (*src)->base();
  REQUIRE(base != nullptr);
  auto mapped = [&](const uint8_t* p) { return p >= base && p < base + bytes.size(); };
  {
    FileWindow w(**src);
    const uint8_t* p = w.at(100, 30);
    CHECK_FALSE(mapped(p));  // a copy, read through the descriptor
    CHECK(std::memcmp(p, base + 100, 30) == 0);
    CHECK(w.at(130, 50) == p + 30);  // inside the same window: no second read
    const uint8_t* q = w.at(100 + FileWindow::kBytes, 16);  // past it: read again from there
    CHECK_FALSE(mapped(q));
    CHECK(std::memcmp(q, base + 100 + FileWindow::kBytes, 16) == 0);
    const uint64_t tail = bytes.size() - 20;  // the window ends at the file's end
    const uint8_t* t = w.at(tail, 20);
    CHECK(std::memcmp(t, base + tail, 20) == 0);
    CHECK(w.at(7, FileWindow::kBytes + 1) == base + 7);  // larger than the window: where it lies
  }
  (*src)->close_file();
  FileWindow closed(**src);
  CHECK(closed.at(100, 30) == base + 100);  // no descriptor: the mapping
  ptread::detail::MemorySource mem(bytes.data(), bytes.size(), "<memory>");
  FileWindow in_memory(mem);
  CHECK(in_memory.at(5, 10) == bytes.data() + 5);
}

TEST_CASE("zip: a large directory and dense records walk the same through the file as in memory", "[zip]") {
  using ptread::detail::ZipArchive;
  using ptread::detail::ZipWalk;
  constexpr size_t kRecords = 3000;
  auto writer = [](bool long_name) {
    ZipWriter w;
    w.add("archive/data.pkl", records().pkl);
    for (size_t k = 0; k < kRecords; ++k) {
      w.add("archive/data/" + std::to_string(k), std::vector<uint8_t>(4, static_cast<uint8_t>(k)));
      // A name longer than the window, half way: that entry is read where it lies.
      if (long_name && k == kRecords / 2) w.add("archive/" + std::string(40000, 'n'), {1, 2, 3});
    }
    w.add("archive/version", records().version);
    return w;
  };
  // What a walk found: its status, the kept entries' names, each numbered record's data
  // offset (or none) and entry index.
  struct Walked {
    std::string status;
    std::vector<std::string> kept;
    std::vector<std::pair<int64_t, uint32_t>> records;
    bool operator==(const Walked& o) const { return status == o.status && kept == o.kept && records == o.records; }
  };
  auto walk = [](const std::shared_ptr<const ptread::detail::Source>& src) {
    Walked r;
    auto zip = ZipArchive::locate(src, ptread::Limits{});
    REQUIRE(zip.ok());
    ZipWalk w;
    const ptread::Status st = ptread::detail::walk_zip(*zip, w);
    r.status = st ? "ok" : st.error().str();
    for (const auto& e : zip->entries()) r.kept.emplace_back(e.name);
    for (size_t n = 0; n < w.data_by_number.size(); ++n) {
      const ptread::detail::StoredRecord& s = w.data_by_number[n];
      r.records.emplace_back(s.data == nullptr ? -1 : static_cast<int64_t>(s.data - src->base()), s.entry);
    }
    return r;
  };
  // The same archive walked from a mapped file (its descriptor open, as during open()) and
  // from memory (never a window), after `mutate`.
  auto both = [&](const ZipBuilt& z, const std::function<void(std::vector<uint8_t>&)>& mutate) {
    std::vector<uint8_t> file = z.flat();
    mutate(file);
    TempFile f("dense_walk.zip");
    REQUIRE(write_file(f.path, file.data(), file.size()));
    auto src = ptread::detail::FileSource::open(f.path, /*map=*/true);
    REQUIRE(src.ok());
    const std::shared_ptr<const ptread::detail::Source> mapped = *src;
    auto zip = ZipArchive::locate(mapped, ptread::Limits{});
    REQUIRE(zip.ok());
    REQUIRE(ZipWalk::dense(*zip));  // the headers through a window
    REQUIRE(z.cd_size >= ZipArchive::kWindowedDirectory);  // the directory too
    const Walked through_file = walk(mapped);
    auto mem = std::make_shared<ptread::detail::MemorySource>(file.data(), file.size(), f.path);
    const Walked in_memory = walk(mem);
    CHECK(through_file.status == in_memory.status);
    CHECK(through_file.kept == in_memory.kept);
    CHECK(through_file.records == in_memory.records);
    (*src)->close_file();
    CHECK(walk(mapped) == in_memory);  // no descriptor: the mapping, the same again
    return in_memory;
  };
  const ZipBuilt z = writer(false).build();
  SECTION("as written") {
    const Walked r = both(z, [](std::vector<uint8_t>&) {});
    CHECK(r.status == "ok");
    CHECK(r.kept == std::vector<std::string>{"archive/data.pkl", "archive/version"});
    REQUIRE(r.records.size() == kRecords);
    for (size_t k = 0; k < kRecords; ++k) {
      INFO("record " << k);
      CHECK(r.records[k].first == static_cast<int64_t>(layout(z, "archive/data/" + std::to_string(k)).data_offset));
    }
  }
  SECTION("a local header without its signature, deep in the file: that record is kept, not taken") {
    const ZipEntryLayout& bad = layout(z, "archive/data/2345");
    const Walked r = both(z, [&](std::vector<uint8_t>& f) { put32(f, static_cast<size_t>(bad.local_offset), 0x01020304); });
    CHECK(r.status == "ok");
    CHECK(r.records[2345].first == -1);
    CHECK(r.records[2345].second == 1);  // entries(): data.pkl, data/2345, version
    CHECK(r.kept == std::vector<std::string>{"archive/data.pkl", "archive/data/2345", "archive/version"});
  }
  SECTION("a directory entry without its signature, past the first window") {
    const ZipEntryLayout& bad = layout(z, "archive/data/2999");
    const Walked r = both(z, [&](std::vector<uint8_t>& f) { put32(f, static_cast<size_t>(bad.central_offset), 0); });
    CHECK(r.status.find("central directory entry 3000 at byte " + std::to_string(bad.central_offset) + " is malformed") !=
          std::string::npos);
  }
  SECTION("a directory entry longer than the window") {
    const ZipBuilt zl = writer(true).build();
    const Walked r = both(zl, [](std::vector<uint8_t>&) {});
    CHECK(r.status == "ok");
    REQUIRE(r.kept.size() == 3);
    CHECK(r.kept[1] == "archive/" + std::string(40000, 'n'));  // named in the mapped directory
  }
}

// ---------------------------------------------------------------------------------------
// 5. Archive comments and the end-of-central-directory search.

TEST_CASE("zip: archive comments", "[zip]") {
  for (size_t len : {size_t{1}, size_t{1000}, size_t{65535}}) {
    INFO("comment of " << len << " bytes");
    ZipWriter w = checkpoint_writer();
    w.comment = std::string(len, 'c');
    auto file = w.build().flat();
    check_like_buffer(open_mem(file), "archive/");
  }
  SECTION("a comment with the EOCD 22 bytes from the end of the file is fine too") {
    ZipWriter w = checkpoint_writer();
    w.zip64_eocd = false;
    w.comment = std::string(22, 'c');
    check_like_buffer(open_mem(w.build().flat()), "archive/");
  }
  for (size_t len : {size_t{65536}, size_t{70000}}) {
    INFO("trailing bytes after the EOCD: " << len << " (the search ends 65535 bytes into a comment)");
    ZipWriter w = checkpoint_writer();
    w.comment = std::string(len, 'c');  // the length field saturates at 65535
    auto file = w.build().flat();
    check_fails(open_mem(file), ErrorCode::truncated, "end-of-central-directory");
  }
}

// ---------------------------------------------------------------------------------------
// 6. Deflated records.

TEST_CASE("zip: deflated records", "[zip]") {
#if PTREAD_WITH_ZLIB
  SECTION("data.pkl, storages and version all deflated") {
    ZipWriter w = checkpoint_writer();
    for (auto& s : w.specs()) s.method = 8;
    const ZipBuilt z = w.build();
    const auto file = z.flat();
    auto ck = open_mem(file);
    check_like_buffer(ck, "archive/");
    if (ck.ok()) {
      CHECK_FALSE(inside(ck->find("w")->data_ptr(), file));  // inflated into a buffer of its own
      CHECK(reinterpret_cast<uintptr_t>(ck->find("w")->data_ptr()) % 64 == 0);
    }
    for (const auto& e : z.entries) {
      CHECK(ptread::detail::le16(&file[static_cast<size_t>(e.central_offset) + 10]) == 8);
    }
  }
  SECTION("deflated records in sizes-in-local-header layout, read mode") {
    ZipWriter w = checkpoint_writer();
    for (auto& s : w.specs()) {
      s.method = 8;
      s.descriptor = false;
      s.pad64 = false;
    }
    TempFile tmp("deflate.pt");
    std::string err;
    REQUIRE(w.build().write_sparse(tmp.path, &err));
    ptread::Options o;
    o.mode = LoadMode::read;
    check_like_buffer(ptread::Checkpoint::open(tmp.path, o), "archive/");
  }
  SECTION("a record whose directory size claims more than it inflates to") {
    ZipWriter w = checkpoint_writer();
    spec(w, "archive/data/0").method = 8;
    spec(w, "archive/data/0").claim_usize = 24 + 8;
    check_fails(open_mem(w.build().flat()), ErrorCode::zip_inflate_failed, "archive/data/0");
  }
  SECTION("data.pkl claiming more, or less, than it inflates to") {
    for (int64_t delta : {int64_t{16}, int64_t{-16}}) {
      INFO("delta " << delta);
      ZipWriter w = checkpoint_writer();
      ZipEntrySpec& s = spec(w, "archive/data.pkl");
      s.method = 8;
      s.claim_usize = static_cast<int64_t>(s.data.size()) + delta;
      check_fails(open_mem(w.build().flat()), ErrorCode::zip_inflate_failed, "archive/data.pkl");
    }
  }
  SECTION("a deflate bomb over Limits::max_inflated_bytes is refused before allocating") {
    ZipWriter w = checkpoint_writer();
    spec(w, "archive/data/0").method = 8;
    spec(w, "archive/data/0").claim_usize = int64_t{100} << 20;
    ptread::Options o;
    o.limits.max_inflated_bytes = uint64_t{1} << 20;
    check_fails(open_mem(w.build().flat(), o), ErrorCode::limit_exceeded, "max_inflated_bytes");
  }
  SECTION("a record claiming a ratio over Limits::max_inflate_ratio is refused") {
    ZipWriter w = checkpoint_writer();
    spec(w, "archive/data/0").method = 8;
    spec(w, "archive/data/0").claim_usize = int64_t{100} << 20;  // from a few dozen bytes
    check_fails(open_mem(w.build().flat()), ErrorCode::limit_exceeded, "max_inflate_ratio");
  }
  SECTION("a deflated record of compressed size 0 claiming 64 MiB gives no bytes") {
    // Library bug: the ratio check skipped compressed_size == 0, so this allocated 64 MiB
    // (up to max_inflated_bytes, 64 GiB by default) before zlib failed on the empty input.
    // A record of no compressed bytes is now empty, as miniz leaves it (torch's buffer of
    // 64 MiB stays unwritten): its storage of 24 bytes is refused before anything is
    // allocated. The sizes are in a ZIP64 extra: in the directory's 32-bit fields, bytes
    // without a compressed size are refused on opening (below).
    ZipWriter w = checkpoint_writer();
    spec(w, "archive/data/0").method = 8;
    spec(w, "archive/data/0").zip64_sizes = true;
    spec(w, "archive/data/0").claim_csize = 0;
    spec(w, "archive/data/0").claim_usize = int64_t{64} << 20;
    check_fails(open_mem(w.build().flat()), ErrorCode::storage_too_small, "holds 0 bytes; data.pkl says it holds 24");
  }
  SECTION("a record of compressed size 0 claiming bytes in the directory's fields is refused on opening") {
    // As miniz refuses it, whatever the method (torch.load: "invalid header or archive is
    // corrupted"), and before anything is allocated for it.
    for (const uint16_t method : {uint16_t{0}, uint16_t{8}}) {
      INFO("method " << method);
      ZipWriter w = checkpoint_writer();
      spec(w, "archive/data/0").method = method;
      spec(w, "archive/data/0").claim_csize = 0;
      spec(w, "archive/data/0").claim_usize = int64_t{64} << 20;
      check_fails(open_mem(w.build().flat()), ErrorCode::zip_corrupt, "compressed size 0 but uncompressed size 67108864");
    }
  }
  SECTION("an empty deflated record reads as zero bytes") {
    ZipWriter w;
    ZipEntrySpec e;
    e.name = "empty";
    e.method = 8;
    w.add(e);
    const auto file = w.build().flat();
    auto zip = open_zip(file);
    REQUIRE(zip.ok());
    REQUIRE(zip->find("empty") != nullptr);
    auto b = zip->read(*zip->find("empty"));
    if (!b.ok()) FAIL(b.error().str());
    CHECK(b->size == 0);
  }
#else
  SECTION("without zlib a deflated record names PTREAD_WITH_ZLIB") {
    ZipWriter w = checkpoint_writer();
    spec(w, "archive/data.pkl").method = 8;  // a valid deflate stream of stored blocks
    check_fails(open_mem(w.build().flat()), ErrorCode::zip_unsupported_compression, "PTREAD_WITH_ZLIB");
  }
  SECTION("without zlib a deflated storage names PTREAD_WITH_ZLIB") {
    ZipWriter w = checkpoint_writer();
    spec(w, "archive/data/1").method = 8;
    check_fails(open_mem(w.build().flat()), ErrorCode::zip_unsupported_compression, "PTREAD_WITH_ZLIB");
  }
#endif
}

// ---------------------------------------------------------------------------------------
// 7. Records past 4 GiB in a real (sparse) file.

TEST_CASE("zip: storages past 4 GiB in a sparse file, mmap and read mode", "[zip]") {
  // The filesystem must make sparse files, or this test would write gigabytes.
  {
    TempFile probe("sparse_probe");
    const uint8_t x = 'x';
    std::string err;
    if (!write_pieces(probe.path, {{uint64_t{64} << 20, &x, 1}}, (uint64_t{64} << 20) + 1, &err)) FAIL(err);
    if (disk_bytes(probe.path) == UINT64_MAX) {
      WARN("the disk use of " << probe.path << " is not known here: if its filesystem makes no sparse files, "
                              "this test writes 4 GiB");
    } else if (disk_bytes(probe.path) >= (uint64_t{1} << 20)) {
      FAIL("the filesystem of " << probe.path << " does not make sparse files (a 64 MiB hole used "
                                << disk_bytes(probe.path) << " bytes): set TMPDIR to one that does");
    }
  }
  ZipWriter w = checkpoint_writer();
  // data.pkl and version first, then a 4 GiB hole, then the three storages.
  auto& specs = w.specs();
  std::rotate(specs.begin() + 1, specs.begin() + 4, specs.end());
  REQUIRE(specs[1].name == "archive/version");
  specs[2].gap_before = uint64_t{1} << 32;
  const ZipBuilt z = w.build();
  const uint64_t four_gib = uint64_t{1} << 32;
  REQUIRE(layout(z, "archive/data/0").local_offset > four_gib);
  REQUIRE(z.cd_offset > four_gib);
  REQUIRE(z.zip64_eocd_offset != UINT64_MAX);

  TempFile tmp("over_4gib.pt");
  std::string err;
  if (!z.write_sparse(tmp.path, &err)) FAIL(err);
  CHECK(file_size(tmp.path) == z.size);
  if (disk_bytes(tmp.path) != UINT64_MAX && disk_bytes(tmp.path) >= (uint64_t{1} << 20)) {
    FAIL(tmp.path << " is " << file_size(tmp.path) << " bytes and uses " << disk_bytes(tmp.path)
                  << " bytes of disk: not sparse");
  }
  // Offsets past 4 GiB come from the ZIP64 extra fields.
  {
    const ZipBuilt::Chunk& tail = z.chunks.back();  // storages, directory, EOCDs
    const uint64_t c = layout(z, "archive/data/0").central_offset - tail.offset;
    CHECK(ptread::detail::le32(&tail.bytes[static_cast<size_t>(c) + 42]) == 0xffffffffu);
  }
  for (auto mode : {LoadMode::mmap, LoadMode::read}) {
    INFO("mode " << ptread::load_mode_name(mode));
    ptread::Options o;
    o.mode = mode;
    auto ck = ptread::Checkpoint::open(tmp.path, o);
    check_like_buffer(ck, "archive/");
    if (ck.ok()) {
      CHECK(reinterpret_cast<uintptr_t>(ck->find("w")->data_ptr()) % 64 == 0);
      auto v = ck->find("w")->to_float32();
      REQUIRE(v.ok());
      std::vector<float> want(6);
      std::memcpy(want.data(), records().data[0].data(), 24);
      CHECK(*v == want);
    }
  }
}

// ---------------------------------------------------------------------------------------
// 8. Broken archives.

TEST_CASE("zip: corrupt archives", "[zip]") {
  SECTION("central directory offset past the end of the file") {
    ZipWriter w = checkpoint_writer();
    w.zip64_eocd = false;
    const ZipBuilt z = w.build();
    auto f = z.flat();
    put32(f, static_cast<size_t>(z.eocd_offset) + 16, z.size + 100);
    check_fails(open_mem(f), ErrorCode::zip_corrupt, "central directory");
  }
  SECTION("ZIP64 central directory offset past the end of the file") {
    ZipWriter w = checkpoint_writer();
    const ZipBuilt z = w.build();
    auto f = z.flat();
    put64(f, static_cast<size_t>(z.zip64_eocd_offset) + 48, uint64_t{1} << 40);
    check_fails(open_mem(f), ErrorCode::zip_corrupt, "central directory");
  }
  SECTION("central directory size reaching into the end records, or past the file") {
    // torch (miniz) bounds the directory by the file and parses entries by count: a size
    // reaching into the EOCD reads as before (tests/data/adversarial/torch.json has the
    // ZIP64 case checked against torch.load); past the file's end it is corrupt.
    for (bool z64 : {false, true}) {
      INFO("ZIP64 EOCD " << z64);
      ZipWriter w = checkpoint_writer();
      w.zip64_eocd = z64;
      const ZipBuilt z = w.build();
      auto f = z.flat();
      const size_t size_at = z64 ? static_cast<size_t>(z.zip64_eocd_offset) + 40 : static_cast<size_t>(z.eocd_offset) + 12;
      const auto put_size = [&](uint64_t v) { z64 ? put64(f, size_at, v) : put32(f, size_at, v); };
      put_size(z.cd_size + 1);
      check_like_buffer(open_mem(f), "archive/");
      put_size(f.size() - z.cd_offset);
      check_like_buffer(open_mem(f), "archive/");
      put_size(f.size() - z.cd_offset + 1);
      check_fails(open_mem(f), ErrorCode::zip_corrupt, "runs past the end of the file");
    }
  }
  SECTION("a local header offset pointing at garbage") {
    ZipWriter w = checkpoint_writer();
    const ZipBuilt z = w.build();
    auto f = z.flat();
    // data/1's entry points into the bytes of data.pkl.
    put32(f, static_cast<size_t>(layout(z, "archive/data/1").central_offset) + 42,
          layout(z, "archive/data.pkl").data_offset + 5);
    check_fails(open_mem(f), ErrorCode::zip_corrupt, "no local header signature");
  }
  SECTION("a local header offset inside the central directory") {
    ZipWriter w = checkpoint_writer();
    const ZipBuilt z = w.build();
    auto f = z.flat();
    put32(f, static_cast<size_t>(layout(z, "archive/data/1").central_offset) + 42, z.cd_offset);
    check_fails(open_mem(f), ErrorCode::zip_record_out_of_bounds, "archive/data/1");
  }
  SECTION("a record whose data runs into the central directory") {
    ZipWriter w = checkpoint_writer();
    std::rotate(w.specs().begin() + 1, w.specs().begin() + 4, w.specs().end());  // data/2 last
    REQUIRE(w.specs().back().name == "archive/data/2");
    w.specs().back().claim_csize = 24 + 100;
    w.specs().back().claim_usize = 24 + 100;
    check_fails(open_mem(w.build().flat()), ErrorCode::zip_record_out_of_bounds, "archive/data/2");
  }
  SECTION("more entries than the directory can hold") {
    for (bool z64 : {false, true}) {
      for (uint64_t count : {uint64_t{6}, uint64_t{1000}}) {
        INFO("ZIP64 EOCD " << z64 << ", count " << count);
        ZipWriter w = checkpoint_writer();
        w.zip64_eocd = z64;
        const ZipBuilt z = w.build();
        auto f = z.flat();
        put16(f, static_cast<size_t>(z.eocd_offset) + 8, count);
        put16(f, static_cast<size_t>(z.eocd_offset) + 10, count);
        if (z64) {
          put64(f, static_cast<size_t>(z.zip64_eocd_offset) + 24, count);
          put64(f, static_cast<size_t>(z.zip64_eocd_offset) + 32, count);
        }
        check_fails(open_mem(f), ErrorCode::zip_corrupt);
      }
    }
  }
  SECTION("a central entry whose name runs past the directory") {
    ZipWriter w = checkpoint_writer();
    const ZipBuilt z = w.build();
    auto f = z.flat();
    put16(f, static_cast<size_t>(z.entries.back().central_offset) + 28, 5000);
    check_fails(open_mem(f), ErrorCode::zip_corrupt, "runs past the directory");
  }
  SECTION("a ZIP64 locator pointing at a place without a ZIP64 EOCD") {
    // torch (miniz) ignores such a locator and reads the classic end record's values
    // (tests/data/adversarial/torch.json: zip64_locator_to_other_bytes.pt); when those are
    // the 0xFFFF... of a ZIP64 archive, nothing locates the directory: corrupt.
    for (uint64_t where : {uint64_t{0}, uint64_t{100}}) {
      INFO("locator -> " << where);
      ZipWriter w = checkpoint_writer();
      const ZipBuilt z = w.build();
      auto f = z.flat();
      put64(f, static_cast<size_t>(z.locator_offset) + 8, where);
      check_like_buffer(open_mem(f), "archive/");
      put16(f, static_cast<size_t>(z.eocd_offset) + 8, 0xffff);
      put16(f, static_cast<size_t>(z.eocd_offset) + 10, 0xffff);
      put32(f, static_cast<size_t>(z.eocd_offset) + 12, 0xffffffffu);
      put32(f, static_cast<size_t>(z.eocd_offset) + 16, 0xffffffffu);
      check_fails(open_mem(f), ErrorCode::zip_corrupt, "central directory");
    }
  }
  SECTION("a ZIP64 locator pointing past the end of the file") {
    // Library bug: read_checked() reports this as zip_record_out_of_bounds (E201), a code
    // for records; a directory pointer to nowhere is zip_corrupt, as for the CD offset.
    ZipWriter w = checkpoint_writer();
    const ZipBuilt z = w.build();
    auto f = z.flat();
    put64(f, static_cast<size_t>(z.locator_offset) + 8, z.size + 1000);
    check_fails(open_mem(f), ErrorCode::zip_corrupt, "ZIP64");
  }
  SECTION("compression method 12 (bzip2)") {
    ZipWriter w = checkpoint_writer();
    spec(w, "archive/data/0").method_field = 12;
    check_fails(open_mem(w.build().flat()), ErrorCode::zip_unsupported_compression, "method 12");
  }
  SECTION("0xFFFFFFFF fields without the ZIP64 extra are taken as they are") {
    // As miniz takes them (torch.load refuses both files: the record is 4 GiB of a small
    // file, or its header lies past it).
    for (int which = 0; which < 2; ++which) {
      INFO((which == 0 ? "sizes" : "offset"));
      ZipWriter w = checkpoint_writer();
      ZipEntrySpec& s = spec(w, "archive/data/1");
      (which == 0 ? s.zip64_sizes : s.zip64_offset) = true;
      s.omit_zip64_extra = true;
      check_fails(open_mem(w.build().flat()), ErrorCode::zip_record_out_of_bounds,
                  which == 0 ? "(4294967295 bytes at byte" : "header offset 0xFFFFFFFF");
    }
  }
  SECTION("a ZIP64 extra too short for the fields it must hold") {
    ZipWriter w = checkpoint_writer();
    ZipEntrySpec& s = spec(w, "archive/data/1");
    s.zip64_sizes = true;
    s.zip64_offset = true;
    const ZipBuilt z = w.build();
    auto f = z.flat();
    const size_t c = static_cast<size_t>(layout(z, "archive/data/1").central_offset);
    const size_t extra = c + 46 + std::string("archive/data/1").size();
    REQUIRE(ptread::detail::le16(&f[extra]) == 1);
    REQUIRE(ptread::detail::le16(&f[extra + 2]) == 24);
    put16(f, extra + 2, 16);  // offset missing; the 8 bytes left become a bogus field
    put16(f, extra + 20, 0x7777);
    put16(f, extra + 22, 4);
    check_fails(open_mem(f), ErrorCode::zip_corrupt, "ZIP64 field too short");
  }
  SECTION("a stored record whose compressed and uncompressed sizes differ") {
    ZipWriter w = checkpoint_writer();
    spec(w, "archive/data/0").claim_usize = 25;
    check_fails(open_mem(w.build().flat()), ErrorCode::zip_corrupt, "archive/data/0");
  }
  SECTION("an empty zip: just the EOCD") {
    ZipWriter w;
    w.zip64_eocd = false;
    const auto f = w.build().flat();
    REQUIRE(f.size() == 22);
    CHECK(f[0] == 'P');
    CHECK(f[2] == 5);
    check_fails(open_mem(f), ErrorCode::no_data_pkl);
  }
  SECTION("no data.pkl, names listed") {
    ZipWriter w = checkpoint_writer();
    w.specs().erase(w.specs().begin());
    check_fails(open_mem(w.build().flat()), ErrorCode::no_data_pkl, "archive/data/0");
  }
  SECTION("a storage record shorter than data.pkl says") {
    ZipWriter w = checkpoint_writer();
    spec(w, "archive/data/0").data.resize(20);
    check_fails(open_mem(w.build().flat()), ErrorCode::storage_too_small, "archive/data/0");
  }
  SECTION("a storage record missing") {
    ZipWriter w = checkpoint_writer();
    w.specs().erase(w.specs().begin() + 2);
    check_fails(open_mem(w.build().flat()), ErrorCode::record_missing, "archive/data/1");
  }
  SECTION("a file cut short") {
    const auto full = checkpoint_writer().build().flat();
    for (size_t keep : {full.size() - 1, full.size() / 2, size_t{30}, size_t{4}}) {
      INFO("first " << keep << " bytes");
      const std::vector<uint8_t> f(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(keep));
      check_fails(open_mem(f), ErrorCode::truncated);
    }
  }
}

// ---------------------------------------------------------------------------------------
// 9. The byteorder record.

TEST_CASE("zip: byteorder record", "[zip]") {
  const Records& r = records();
  SECTION("big: byte-swapped storages read as the little-endian original") {
    ZipWriter w = checkpoint_writer();
    spec(w, "archive/data/0").data = byteswapped(r.data[0], 4);  // F32
    spec(w, "archive/data/1").data = byteswapped(r.data[1], 4);  // F32
    spec(w, "archive/data/2").data = byteswapped(r.data[2], 8);  // I64
    ZipEntrySpec bo;
    bo.name = "archive/byteorder";
    bo.data = to_bytes("big");
    w.specs().insert(w.specs().begin() + 1, bo);
    const auto file = w.build().flat();
    auto ck = open_mem(file);
    check_like_buffer(ck, "archive/");
    REQUIRE(ck.ok());
    CHECK(ck->big_endian());
    std::vector<float> want(6);
    std::memcpy(want.data(), r.data[0].data(), 24);
    auto v = ck->find("w")->to_float32();
    REQUIRE(v.ok());
    CHECK(*v == want);
    // The file's bytes are left as they are.
    const auto again = w.build().flat();
    CHECK(again == file);

    SECTION("from a file, mmap and read mode") {
      TempFile tmp("big_endian.pt");
      REQUIRE(write_file(tmp.path, file.data(), file.size()));
      for (auto mode : {LoadMode::mmap, LoadMode::read}) {
        INFO("mode " << ptread::load_mode_name(mode));
        ptread::Options o;
        o.mode = mode;
        auto fck = ptread::Checkpoint::open(tmp.path, o);
        check_like_buffer(fck, "archive/");
        if (fck.ok()) CHECK(fck->big_endian());
      }
    }
  }
  for (const char* order : {"little", "big"}) {
    const bool big = order[0] == 'b';
    INFO("byteorder '" << order << "'");
    ZipWriter w = checkpoint_writer();
    if (big) {
      spec(w, "archive/data/0").data = byteswapped(r.data[0], 4);
      spec(w, "archive/data/1").data = byteswapped(r.data[1], 4);
      spec(w, "archive/data/2").data = byteswapped(r.data[2], 8);
    }
    ZipEntrySpec bo;
    bo.name = "archive/byteorder";
    bo.data = to_bytes(order);
    w.add(bo);
    const auto file = w.build().flat();  // outlives the views
    auto ck = open_mem(file);
    check_like_buffer(ck, "archive/");
    if (ck.ok()) CHECK(ck->big_endian() == big);
  }
  // torch 2.x compares the record's bytes exactly (serialization.py: `byteorderdata not in
  // [b"little", b"big"]` raises ValueError): a newline or a space is another value
  for (const char* order : {"middle", "", "BIG", "little\n", "big\n", "little "}) {
    INFO("byteorder '" << order << "'");
    ZipWriter w = checkpoint_writer();
    ZipEntrySpec bo;
    bo.name = "archive/byteorder";
    bo.data = to_bytes(order);
    w.add(bo);
    check_fails(open_mem(w.build().flat()), ErrorCode::zip_corrupt, "byte order");
  }
}

// ---------------------------------------------------------------------------------------
// The container alone: an archive that starts after a preamble (offsets from the file start).

TEST_CASE("zip: ZipArchive reads an archive placed after a preamble", "[zip]") {
  ZipWriter w;
  w.base_offset = 1000;
  w.add("a", to_bytes("first record"));
  ZipEntrySpec s;
  s.name = "dir/b";
  s.data = to_bytes(std::string(300, 'q'));
  s.zip64_sizes = true;  // (without them, an offset of 0xFFFFFFFF in so small a file is refused, as miniz refuses it)
  s.zip64_offset = true;
  w.add(s);
  const ZipBuilt z = w.build();
  auto f = z.flat();
  std::fill(f.begin(), f.begin() + 1000, uint8_t{0x5a});
  auto zip = open_zip(f);
  REQUIRE(zip.ok());
  REQUIRE(zip->entries().size() == 2);
  CHECK(zip->find("missing") == nullptr);
  const auto* b = zip->find("dir/b");
  REQUIRE(b != nullptr);
  CHECK(b->local_header_offset == z.entries[1].local_offset);
  CHECK(b->local_header_offset > 1000);
  auto off = zip->data_offset(*b);
  REQUIRE(off.ok());
  CHECK(*off % 64 == 0);
  auto bytes = zip->read(*b);
  REQUIRE(bytes.ok());
  CHECK(std::string(reinterpret_cast<const char*>(bytes->data), bytes->size) == std::string(300, 'q'));
  auto a = zip->read(*zip->find("a"));
  REQUIRE(a.ok());
  CHECK(std::string(reinterpret_cast<const char*>(a->data), a->size) == "first record");

  SECTION("Limits::max_zip_entries") {
    ptread::Limits l;
    l.max_zip_entries = 1;
    check_fails(open_zip(f, l), ErrorCode::limit_exceeded);
  }
}

TEST_CASE("Limits::max_pickle_bytes bounds data.pkl, TorchScript's code/ files and constants.pkl", "[zip][limits]") {
  auto opts = [](size_t max_pickle, LoadMode mode) {
    ptread::Options o;
    o.mode = mode;
    o.limits.max_pickle_bytes = max_pickle;
    return o;
  };
  // proto2.pt's data.pkl is 826 bytes, in every load mode (mmap reads the pickle beside
  // the directory walk only when it is within the limit).
  const std::string proto2 = fixture_dir() + "/proto2.pt";
  const std::vector<uint8_t> proto2_bytes = read_file(proto2);
  for (LoadMode mode : {LoadMode::mmap, LoadMode::read}) {
    INFO(ptread::load_mode_name(mode));
    check_fails(ptread::Checkpoint::open(proto2, opts(825, mode)), ErrorCode::limit_exceeded, "data.pkl");
    CHECK(ptread::Checkpoint::open(proto2, opts(826, mode)).ok());
  }
  check_fails(open_mem(proto2_bytes, opts(825, LoadMode::memory)), ErrorCode::limit_exceeded, "data.pkl");
  CHECK(open_mem(proto2_bytes, opts(826, LoadMode::memory)).ok());

  // ts_trace.pt: data.pkl 395 bytes, code/ .py files 423 + 368 (deflated), constants.pkl 145.
  const std::string trace = fixture_dir() + "/ts_trace.pt";
#if PTREAD_WITH_ZLIB
  check_fails(ptread::Checkpoint::open(trace, opts(790, LoadMode::mmap)), ErrorCode::limit_exceeded, "code/");
#else
  CHECK(ptread::Checkpoint::open(trace, opts(790, LoadMode::mmap)).ok());  // code/ is not read without zlib
#endif
  CHECK(ptread::Checkpoint::open(trace, opts(791, LoadMode::mmap)).ok());

  // The same records but code/ (deflated: not read without zlib) with a constants.pkl of
  // 1,001 bytes (a pickled string): over a limit the rest is within.
  const std::vector<uint8_t> trace_bytes = read_file(trace);  // (the archive reads from it)
  auto zip = open_zip(trace_bytes);
  REQUIRE(zip.ok());
  ZipWriter w;
  size_t replaced = 0;
  for (const auto& e : zip->entries()) {
    if (e.name.find("/code/") != std::string::npos) continue;
    auto b = zip->read(e);
    REQUIRE(b.ok());
    std::vector<uint8_t> data(b->data, b->data + b->size);
    if (e.name.size() >= 14 && e.name.substr(e.name.size() - 14) == "/constants.pkl") {
      data = {0x80, 0x02, 'X', 0xe1, 0x03, 0, 0};  // PROTO 2, BINUNICODE of 993 bytes
      data.resize(data.size() + 993, 'c');
      data.push_back('.');
      REQUIRE(data.size() == 1001);
      ++replaced;
    }
    w.add(std::string(e.name), data);
  }
  REQUIRE(replaced == 1);
  const std::vector<uint8_t> big_constants = w.build().flat();
  check_fails(open_mem(big_constants, opts(1000, LoadMode::memory)), ErrorCode::limit_exceeded, "constants.pkl");
  auto within = open_mem(big_constants, opts(1001, LoadMode::memory));
  REQUIRE(within.ok());
  CHECK(within->tensor_count() == ptread::Checkpoint::open(trace)->tensor_count());
}

TEST_CASE("zip: a storage referenced under two dtypes reads as torch.load; in TorchScript, refused", "[zip]") {
  // storage_references.pt (expectations from torch.load, checked with every fixture) refers
  // to storage '0' as FloatStorage, then DoubleStorage: torch.load gives each tensor the
  // first reference's storage. torch.jit.load reads each reference on its own instead, so
  // the same records in a TorchScript archive (a constants.pkl beside data.pkl) are refused,
  // in every way the archive can be opened, and never read with one of the two answers.
  const std::string path = fixture_dir() + "/storage_references.pt";
  const std::vector<unsigned char> file = read_file(path);
  REQUIRE(!file.empty());
  auto src = std::make_shared<ptread::detail::MemorySource>(file.data(), file.size(), path);
  auto zip = ptread::detail::ZipArchive::open(src, ptread::Limits{});
  REQUIRE(zip.ok());
  for (bool torchscript : {false, true}) {
    INFO((torchscript ? "with constants.pkl" : "as saved"));
    ZipWriter w;
    for (const auto& e : zip->entries()) {
      auto bytes = zip->read(e);
      REQUIRE(bytes.ok());
      w.add(std::string(e.name), std::vector<uint8_t>(bytes->data, bytes->data + bytes->size));
      if (torchscript && e.name == "storage_references/data.pkl") {
        w.add("storage_references/constants.pkl", std::vector<uint8_t>{0x80, 0x02, ')', '.'});
      }
    }
    const std::vector<uint8_t> out = w.build().flat();
    TempFile tmp("refs.pt");
    REQUIRE(write_file(tmp.path, out.data(), out.size()));
    for (int way = 0; way < 3; ++way) {
      INFO("way " << way << " (memory, mmap, read)");
      ptread::Options o;
      o.mode = way == 2 ? LoadMode::read : LoadMode::mmap;
      for (unsigned threads : {1u, 2u}) {  // 2: the directory walked beside the pickle
        o.threads = threads;
        auto ck = way == 0 ? open_mem(out, o) : ptread::Checkpoint::open(tmp.path, o);
        if (torchscript) {
          check_fails(ck, ErrorCode::unsupported_format, "storage '0' is referenced as F32 of 24 bytes, then as F64");
          continue;
        }
        REQUIRE(ck.ok());
        REQUIRE(ck->tensors().size() == 6);
        const ptread::Tensor* b = ck->find("b");
        REQUIRE(b != nullptr);
        CHECK(b->dtype() == ptread::DType::F32);
        CHECK(b->storage()->nbytes() == 24);
        const ptread::Tensor* e = ck->find("e");  // a record of 16 bytes, a storage of 8
        REQUIRE(e != nullptr);
        CHECK(e->storage()->nbytes() == 8);
      }
    }
  }
}

TEST_CASE("zip: data.pkl read as torch.load's unpickling reads its frames", "[zip][pickle]") {
  // buffer.pt's data.pkl begins "\x80\x02}q\x00(X\x01\x00\x00\x00w": a FRAME after PROTO.
  ptread::Options one, two;
  two.threads = 2;  // the pickle read beside the directory walk
  const std::vector<uint8_t> pkl = records().pkl;
  REQUIRE(pkl.size() > 7);
  REQUIRE(std::memcmp(pkl.data() + 2, "}q\x00(X", 5) == 0);
  for (const ptread::Options& o : {one, two}) {
    INFO("threads " << o.threads);
    // A frame over the whole pickle, or ending after an opcode byte: read as without it.
    check_like_buffer(open_mem(framed_fixture("buffer.pt", pkl.size() - 2), o), "archive/");
    check_like_buffer(open_mem(framed_fixture("buffer.pt", 5), o), "archive/");
    // Ending inside BINUNICODE's length: torch.load (a BytesIO) drops the frame's rest and
    // reads the length after it, then runs past the end ("pickle data was truncated", torch
    // 1.13), where a flat reading would read the file. (frame_crossings.pt: such reads torch
    // reads, expected.json.)
    const std::vector<uint8_t> crossing = framed_fixture("buffer.pt", 6);  // (open_memory borrows it)
    auto ck = open_mem(crossing, o);
    REQUIRE_FALSE(ck.ok());
    CHECK(ck.error().code() == ErrorCode::pickle_truncated);
    CHECK(ck.error().str().find("opcode BINUNICODE (0x58), byte 15 of") != std::string::npos);
  }
#if PTREAD_WITH_ZLIB  // (ts_script.pt's code/ records are deflated: framed_fixture reads them)
  // torch.jit.load's own unpickler, which reads a TorchScript archive's data.pkl, has no
  // FRAME: a framed one is refused, however long the frame (torch 1.13: "Unknown opcode for
  // unpickling at ...: 149"), not read flat.
  for (const uint64_t frame : {uint64_t{3}, uint64_t{1} << 20}) {
    for (const ptread::Options& o : {one, two}) {
      INFO("frame " << frame << ", threads " << o.threads);
      const std::vector<uint8_t> file = framed_fixture("ts_script.pt", frame);  // (open_memory borrows it)
      auto ts = open_mem(file, o);
      REQUIRE_FALSE(ts.ok());
      CHECK(ts.error().code() == ErrorCode::pickle_unsupported_opcode);
      CHECK(ts.error().str().find("opcode FRAME at byte 2 of 'ts_script/data.pkl' in a TorchScript archive") != std::string::npos);
    }
  }
#endif
}
