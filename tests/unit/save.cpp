// Writers: save_pt and save_safetensors read back through ptread (every dtype, views,
// shared storages, empty and 0-dim tensors, unicode names, conversions, ZIP64, the
// torch-written fixtures re-saved) and their errors. tests/writers/check_writers.py reads
// what they write back with real torch.
#include <catch2/catch.hpp>

#include "support/helpers.hpp"
#include "support/zip_writer.hpp"

#include <map>
#include <set>
#include <unistd.h>

namespace {

using ptread::DType;
using ptread::ErrorCode;
using ptread::Tensor;

// A path under temp_dir(); the file and its ".tmp" are removed at the end of scope.
struct TempPath {
  std::string path;
  explicit TempPath(const std::string& name) {
    path = ptread_test::temp_dir() + "/ptread_save_test_" + std::to_string(ptread_test::test_pid()) + "_" + name;
  }
  ~TempPath() {
    ptread_test::remove_path(path);
    ptread_test::remove_path(path + ".tmp");
  }
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;
};

// n bytes 7, 18, 29, ... (as bool: 0 and 1): elements of every dtype differ.
std::shared_ptr<const ptread::Storage> pattern(size_t n, bool as_bool = false) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(n);
  for (size_t k = 0; k < n; ++k) (*bytes)[k] = static_cast<uint8_t>(as_bool ? k % 3 == 0 : 7 + 11 * k);
  const uint8_t* p = bytes->data();
  return std::make_shared<const ptread::Storage>(p, n, bytes);
}

Tensor view(std::shared_ptr<const ptread::Storage> st, DType dt, std::vector<int64_t> shape, std::vector<int64_t> strides,
            int64_t offset = 0) {
  auto t = Tensor::view(std::move(st), dt, shape, strides, offset);
  REQUIRE(t.ok());
  return *t;
}

// The tensor's values as `as`, C order.
std::vector<uint8_t> values(const Tensor& t, DType as) {
  std::vector<uint8_t> out(static_cast<size_t>(t.numel()) * ptread::dtype_size(as));
  REQUIRE(t.copy_to(out.data(), out.size(), as).ok());
  return out;
}
std::vector<uint8_t> values(const Tensor& t) { return values(t, t.dtype()); }

ptread::Checkpoint reopen(const std::string& path) {
  auto ck = ptread::Checkpoint::open(path);
  INFO(path << ": " << (ck ? "" : ck.error().str()));
  REQUIRE(ck.ok());
  return std::move(*ck);
}

// Names, dtypes, shapes, strides and offsets as written; values as `expect` gives them.
void check_same(const ptread::Checkpoint& ck, const std::vector<ptread::NamedTensor>& want) {
  REQUIRE(ck.tensors().size() == want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    const Tensor& g = ck.tensors()[k].tensor;
    const Tensor& w = want[k].tensor;
    INFO("tensor " << k << " '" << want[k].name << "'");
    CHECK(ck.tensors()[k].name == want[k].name);
    CHECK(g.dtype() == w.dtype());
    CHECK(g.shape() == w.shape());
    CHECK(g.strides() == w.strides());
    CHECK(g.storage_offset() == w.storage_offset());
    CHECK(g.device() == "cpu");
    CHECK_FALSE(g.requires_grad());
    CHECK(values(g) == values(w));
  }
}

// Whether tensors i and j of the re-read file share a Storage.
bool shared(const ptread::Checkpoint& ck, size_t i, size_t j) {
  return ck.tensors()[i].tensor.storage() == ck.tensors()[j].tensor.storage();
}

const DType kPlainDTypes[] = {DType::BOOL, DType::U8, DType::I8, DType::I16, DType::U16, DType::I32, DType::U32,
                              DType::I64, DType::U64, DType::F16, DType::BF16, DType::F32, DType::F64, DType::C32,
                              DType::C64, DType::C128, DType::F8_E4M3, DType::F8_E5M2, DType::F8_E4M3FNUZ,
                              DType::F8_E5M2FNUZ, DType::F8_E8M0, DType::F4_E2M1FN_X2, DType::BITS8, DType::BITS16,
                              DType::BITS1X8, DType::BITS2X4, DType::BITS4X2};

}  // namespace

TEST_CASE("save_pt round-trips every plain dtype", "[save]") {
  TempPath out("dtypes.pt");
  std::vector<ptread::NamedTensor> want;
  for (DType dt : kPlainDTypes) {
    const int64_t n = 6;
    want.push_back({ptread::dtype_name(dt), view(pattern(static_cast<size_t>(n) * ptread::dtype_size(dt), dt == DType::BOOL),
                                                 dt, {2, 3}, {3, 1})});
  }
  auto r = ptread::save_pt(out.path, want);
  INFO((r ? "" : r.error().str()));
  REQUIRE(r.ok());
  CHECK(r->tensors == want.size());
  CHECK(r->storages == want.size());
  auto ck = reopen(out.path);
  CHECK(std::string(ck.format_name()) == "zip");
  CHECK(ck.archive_prefix() == "ptread_save_test_" + std::to_string(ptread_test::test_pid()) + "_dtypes/");
  check_same(ck, want);
}

TEST_CASE("save_pt keeps views and shared storages", "[save]") {
  TempPath out("views.pt");
  auto base = pattern(30 * 4);
  auto other = pattern(16);
  const std::vector<ptread::NamedTensor> want = {
      {"base", view(base, DType::F32, {6, 5}, {5, 1})},
      {"transpose", view(base, DType::F32, {5, 6}, {1, 5})},
      {"rows", view(base, DType::F32, {2, 5}, {5, 1}, 5)},
      {"strided", view(base, DType::F32, {3, 2}, {10, 2}, 1)},
      {"expand", view(base, DType::F32, {4, 5}, {0, 1}, 10)},
      {"overlap", view(base, DType::F32, {4, 3}, {2, 1}, 1)},
      {"scalar_view", view(base, DType::F32, {}, {}, 13)},
      {"empty_view_at_end", view(base, DType::F32, {0, 5}, {5, 1}, 30)},
      {"as_int", view(base, DType::I32, {3}, {1}, 2)},  // the same bytes as another dtype
      {"scalar", view(other, DType::I64, {}, {})},
      {"empty_no_storage", view(nullptr, DType::F16, {3, 0}, {0, 1})},
      {"tied_a", view(other, DType::F32, {4}, {1})},
      {"tied_b", view(other, DType::F32, {4}, {1})},
  };
  auto r = ptread::save_pt(out.path, want);
  REQUIRE(r.ok());
  CHECK(r->storages == 5);  // base as F32, base as I32, other as I64, empty, other as F32
  auto ck = reopen(out.path);
  check_same(ck, want);
  for (size_t k = 1; k < 8; ++k) CHECK(shared(ck, 0, k));
  CHECK_FALSE(shared(ck, 0, 8));
  CHECK(shared(ck, 11, 12));
  CHECK_FALSE(shared(ck, 9, 11));
}

TEST_CASE("save_pt writes unicode names and many entries", "[save]") {
  TempPath out("names.pt");
  auto st = pattern(4000 * 2);
  std::vector<std::pair<std::string, Tensor>> want;  // a vector of pairs works too
  want.emplace_back("", view(st, DType::F16, {2}, {1}));
  want.emplace_back("ünïcödé.权重.\xf0\x9f\x99\x82", view(st, DType::F16, {2}, {1}, 2));
  want.emplace_back("surrogate.\xed\xa0\x80", view(st, DType::BF16, {2}, {1}, 4));  // Python's "surrogatepass"
  // past the 1000-item SETITEMS batches and the 256 one-byte memo indices
  for (int k = 0; k < 2500; ++k) want.emplace_back("layer" + std::to_string(k), view(st, DType::I16, {1 + k % 3}, {1}, k));
  auto r = ptread::save_pt(out.path, want);
  REQUIRE(r.ok());
  CHECK(r->storages == 3);
  auto ck = reopen(out.path);
  std::vector<ptread::NamedTensor> expect;
  for (const auto& p : want) expect.push_back({p.first, p.second});
  check_same(ck, expect);
}

TEST_CASE("save_pt applies conj and neg bits", "[save]") {
  TempPath out("bits.pt");
  auto z = pattern(4 * 8);
  Tensor plain = view(z, DType::C64, {4}, {1});
  Tensor conj = plain;
  conj.set_math_bits(true, false);
  Tensor neg = view(pattern(4 * 4), DType::F32, {2, 2}, {1, 2});
  neg.set_math_bits(false, true);
  auto r = ptread::save_pt(out.path, std::vector<ptread::NamedTensor>{{"plain", plain}, {"conj", conj}, {"neg", neg}});
  REQUIRE(r.ok());
  CHECK(r->storages == 3);
  auto ck = reopen(out.path);
  for (size_t k = 0; k < 3; ++k) {
    const Tensor& g = ck.tensors()[k].tensor;
    CHECK_FALSE(g.is_conj());
    CHECK_FALSE(g.is_neg());
  }
  CHECK(values(ck.tensors()[0].tensor) == values(plain));
  CHECK(values(ck.tensors()[1].tensor) == values(conj));  // the conjugate, resolved
  CHECK(values(ck.tensors()[2].tensor) == values(neg));
  CHECK(values(ck.tensors()[1].tensor) != values(plain));
  CHECK(ck.tensors()[2].tensor.strides() == neg.strides());
}

TEST_CASE("save_pt float_dtype converts floating storages and keeps ties", "[save]") {
  auto f32 = pattern(12 * 4);
  const std::vector<ptread::NamedTensor> src = {
      {"w", view(f32, DType::F32, {3, 4}, {4, 1})},
      {"w_t", view(f32, DType::F32, {4, 3}, {1, 4})},
      {"f64", view(pattern(5 * 8), DType::F64, {5}, {1})},
      {"f16", view(pattern(5 * 2), DType::F16, {5}, {1})},
      {"bf16", view(pattern(5 * 2), DType::BF16, {5}, {1})},
      {"i32", view(pattern(5 * 4), DType::I32, {5}, {1})},
      {"mask", view(pattern(5, true), DType::BOOL, {5}, {1})},
      {"c64", view(pattern(2 * 8), DType::C64, {2}, {1})},
      {"fp8", view(pattern(3), DType::F8_E5M2, {3}, {1})},
  };
  for (DType to : {DType::F16, DType::BF16, DType::F32, DType::F64}) {
    INFO("float_dtype " << ptread::dtype_name(to));
    TempPath out(std::string("convert_") + ptread::dtype_name(to) + ".pt");
    ptread::SavePtOptions o;
    o.float_dtype = to;
    REQUIRE(ptread::save_pt(out.path, src, o).ok());
    auto ck = reopen(out.path);
    REQUIRE(ck.tensors().size() == src.size());
    for (size_t k = 0; k < src.size(); ++k) {
      const Tensor& g = ck.tensors()[k].tensor;
      const Tensor& w = src[k].tensor;
      const bool floating = k < 5;
      INFO(src[k].name);
      CHECK(g.dtype() == (floating ? to : w.dtype()));
      CHECK(g.strides() == w.strides());
      CHECK(values(g) == values(w, g.dtype()));  // as copy_to converts: torch's CPU .to()
    }
    CHECK(shared(ck, 0, 1));
  }
  ptread::SavePtOptions bad;
  bad.float_dtype = DType::I32;
  TempPath out("convert_bad.pt");
  CHECK(ptread::save_pt(out.path, src, bad).code() == ErrorCode::invalid_argument);
  CHECK_FALSE(ptread_test::path_exists(out.path));
}

TEST_CASE("save_pt aligns records, writes right CRCs and ZIP64 on demand", "[save]") {
  auto st = pattern(1000);
  const std::vector<ptread::NamedTensor> want = {{"a", view(st, DType::U8, {999}, {1}, 1)},
                                                 {"b", view(pattern(77), DType::I8, {77}, {1})},
                                                 {"c", view(pattern(0), DType::F32, {0}, {1})}};
  for (bool zip64 : {false, true}) {
    INFO("force_zip64 " << zip64);
    TempPath out(zip64 ? "zip64.pt" : "zip32.pt");
    ptread::SavePtOptions o;
    o.force_zip64 = zip64;
    o.archive_name = "weights";
    REQUIRE(ptread::save_pt(out.path, want, o).ok());
    const auto file = ptread_test::read_file(out.path);
    auto src = std::make_shared<ptread::detail::MemorySource>(file.data(), file.size(), out.path);
    auto zip = ptread::detail::ZipArchive::open(src, ptread::Limits{});
    REQUIRE(zip.ok());
    std::vector<std::string> names;
    for (const auto& e : zip->entries()) {
      names.emplace_back(e.name);
      auto off = zip->data_offset(e);
      REQUIRE(off.ok());
      if (e.name.find("/data/") != std::string_view::npos) CHECK(*off % 64 == 0);
      // the data descriptor after the data: "PK\7\8", then the CRC-32 of the data
      const size_t d = static_cast<size_t>(*off + e.compressed_size);
      REQUIRE(d + 8 <= file.size());
      CHECK(ptread::detail::le32(&file[d]) == 0x08074b50u);
      CHECK(ptread::detail::le32(&file[d + 4]) == ptread_test::crc32_of(&file[static_cast<size_t>(*off)], e.compressed_size));
      CHECK(ptread::detail::le32(&file[static_cast<size_t>(e.local_header_offset) + 22]) == (zip64 ? 0xffffffffu : 0u));
    }
    CHECK(names == std::vector<std::string>{"weights/data.pkl", "weights/byteorder", "weights/data/0", "weights/data/1",
                                            "weights/data/2", "weights/version"});
    check_same(reopen(out.path), want);
  }
}

TEST_CASE("CRC-32 agrees with an independent implementation", "[save]") {
  std::vector<uint8_t> data(100003);
  for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<uint8_t>((k * 2654435761u) >> 13);
  using ptread::detail::Crc32;
  // every length around the folding path's 64-byte blocks and 16-byte tail, at every alignment
  for (size_t off = 0; off < 16; ++off) {
    for (size_t n = 0; n < 300; ++n) {
      const uint32_t want = ptread_test::crc32_of(data.data() + off, n);
      if (Crc32::update(0, data.data() + off, n) != want || Crc32::update_portable(0, data.data() + off, n) != want) {
        FAIL("CRC-32 differs at offset " << off << ", length " << n);
      }
    }
  }
  CHECK(Crc32::update(0, data.data(), data.size()) == ptread_test::crc32_of(data));
  // in pieces, as the data streams out
  CHECK(Crc32::update(Crc32::update(0, data.data(), 77), data.data() + 77, data.size() - 77) == ptread_test::crc32_of(data));
}

TEST_CASE("save_pt names the archive as torch.save does", "[save]") {
  CHECK(ptread::detail::torch_archive_name("dir/my.model.pt") == "my.model");
  CHECK(ptread::detail::torch_archive_name("model") == "model");
  CHECK(ptread::detail::torch_archive_name("a.b/.pt") == "archive");
  CHECK(ptread::detail::torch_archive_name("dir/") == "archive");
  TempPath out("archive.pt");
  ptread::SavePtOptions o;
  o.archive_name = "a/b";
  CHECK(ptread::save_pt(out.path, std::map<std::string, Tensor>{}, o).code() == ErrorCode::invalid_argument);
  o.archive_name.clear();
  REQUIRE(ptread::save_pt(out.path, std::map<std::string, Tensor>{}, o).ok());  // an empty state dict
  auto ck = reopen(out.path);
  CHECK(ck.tensors().empty());
  CHECK(ck.root().is_dict());
}

TEST_CASE("save_pt refuses what torch cannot read back, and writes nothing", "[save]") {
  TempPath out("errors.pt");
  auto st = pattern(16);
  const Tensor t = view(st, DType::F32, {4}, {1});
  auto code_of = [&](const std::vector<ptread::NamedTensor>& items) {
    auto r = ptread::save_pt(out.path, items);
    CHECK_FALSE(ptread_test::path_exists(out.path));
    CHECK_FALSE(ptread_test::path_exists(out.path + ".tmp"));
    if (!r) CHECK(r.error().str().find("save_pt") != std::string::npos);
    return r.code();
  };
  CHECK(code_of({{"x", t}, {"x", t}}) == ErrorCode::invalid_argument);
  CHECK(code_of({{"bad\xff", t}}) == ErrorCode::invalid_argument);
  CHECK(code_of({{"q", view(st, DType::QINT8, {4}, {1})}}) == ErrorCode::unsupported_tensor);
  CHECK(code_of({{"none", Tensor()}}) == ErrorCode::invalid_argument);
  // the file cannot be created; the final path is a folder (rename fails)
  CHECK(ptread::save_pt("/nonexistent-ptread-dir/x.pt", std::vector<ptread::NamedTensor>{{"x", t}}).code() ==
        ErrorCode::io_error);
  TempPath folder("folder");
  REQUIRE(ptread_test::make_dir(folder.path));
  auto r = ptread::save_pt(folder.path, std::vector<ptread::NamedTensor>{{"x", t}});
  CHECK(r.code() == ErrorCode::io_error);
  CHECK_FALSE(ptread_test::path_exists(folder.path + ".tmp"));
}

TEST_CASE("writers report progress up to the total", "[save]") {
  TempPath out("progress.pt");
  std::vector<ptread::NamedTensor> items = {{"big", view(pattern(40u << 20), DType::F32, {10u << 20}, {1})},
                                            {"small", view(pattern(8), DType::I64, {1}, {1})}};
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  ptread::SavePtOptions o;
  o.progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  REQUIRE(ptread::save_pt(out.path, items, o).ok());
  REQUIRE(calls.size() >= 3);  // 40 MiB goes out in pieces
  CHECK(calls.front() == std::make_pair(uint64_t{0}, uint64_t{(40u << 20) + 8}));
  CHECK(calls.back() == std::make_pair(uint64_t{(40u << 20) + 8}, uint64_t{(40u << 20) + 8}));
  for (size_t k = 1; k < calls.size(); ++k) CHECK(calls[k].first > calls[k - 1].first);
  calls.clear();
  ptread::SaveSafetensorsOptions so;
  so.progress = o.progress;
  items[0].tensor = view(items[0].tensor.storage(), DType::F32, {1024, 1024}, {1, 1024});  // a strided copy
  REQUIRE(ptread::save_safetensors(out.path, items, so).ok());
  CHECK(calls.back() == std::make_pair(uint64_t{(4u << 20) + 8}, uint64_t{(4u << 20) + 8}));
}

namespace {

struct Safetensors {
  ptread_test::Json header;
  std::vector<uint8_t> data;
};

Safetensors read_safetensors(const std::string& path) {
  const auto file = ptread_test::read_file(path);
  REQUIRE(file.size() >= 8);
  uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | file[static_cast<size_t>(b)];
  REQUIRE(n <= file.size() - 8);
  CHECK((8 + n) % 8 == 0);
  Safetensors st;
  std::string err;
  REQUIRE(ptread_test::parse_json(std::string(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(n)),
                                  st.header, &err));
  st.data.assign(file.begin() + 8 + static_cast<std::ptrdiff_t>(n), file.end());
  return st;
}

}  // namespace

TEST_CASE("save_safetensors writes every dtype it can hold", "[save]") {
  TempPath out("all.safetensors");
  auto base = pattern(24 * 8);
  Tensor conj = view(base, DType::C64, {2, 3}, {1, 2}, 1);
  conj.set_math_bits(true, false);
  std::vector<ptread::NamedTensor> items = {{"transposed", view(base, DType::F32, {4, 3}, {1, 4}, 2)},
                                            {"conj", conj},
                                            {"scalar", view(base, DType::I64, {}, {}, 3)},
                                            {"empty", view(nullptr, DType::BF16, {0, 2}, {2, 1})},
                                            {"ünï", view(base, DType::F8_E4M3, {5}, {1})}};
  for (DType dt : kPlainDTypes) {
    if (ptread::detail::safetensors_dtype(dt)) items.push_back({ptread::dtype_name(dt), view(pattern(16, dt == DType::BOOL), dt, {2}, {1})});
  }
  ptread::SaveSafetensorsOptions o;
  o.metadata = {{"format", "pt"}, {"note", "a \"quoted\"\nline"}};
  auto r = ptread::save_safetensors(out.path, items, o);
  REQUIRE(r.ok());
  CHECK(r->tensors == items.size());
  const Safetensors st = read_safetensors(out.path);
  REQUIRE(st.header.size() == items.size() + 1);
  CHECK(st.header.as_object()[0].first == "__metadata__");
  CHECK(st.header["__metadata__"]["note"].as_string() == "a \"quoted\"\nline");
  uint64_t pos = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    const ptread_test::Json& e = st.header[items[k].name];
    INFO(items[k].name);
    CHECK(e["dtype"].as_string() == ptread::dtype_name(items[k].tensor.dtype()));
    CHECK(ptread_test::shape_str(e["shape"]) == ptread_test::shape_str(items[k].tensor.shape()));
    const auto b = static_cast<uint64_t>(e["data_offsets"][0].as_int()), end = static_cast<uint64_t>(e["data_offsets"][1].as_int());
    CHECK(b == pos);
    REQUIRE(end <= st.data.size());
    CHECK(std::vector<uint8_t>(st.data.begin() + static_cast<std::ptrdiff_t>(b), st.data.begin() + static_cast<std::ptrdiff_t>(end)) ==
          values(items[k].tensor));
    pos = end;
  }
  CHECK(pos == st.data.size());
  // without metadata there is no "__metadata__"
  REQUIRE(ptread::save_safetensors(out.path, std::vector<ptread::NamedTensor>{{"x", items[0].tensor}}).ok());
  CHECK_FALSE(read_safetensors(out.path).header.contains("__metadata__"));
}

TEST_CASE("save_safetensors refuses or skips what the format cannot hold", "[save]") {
  TempPath out("skip.safetensors");
  auto st = pattern(64);
  const Tensor ok = view(st, DType::F32, {2}, {1});
  const std::vector<std::pair<std::string, Tensor>> items = {
      {"c128", view(st, DType::C128, {2}, {1})}, {"c32", view(st, DType::C32, {2}, {1})},
      {"fnuz", view(st, DType::F8_E4M3FNUZ, {2}, {1})}, {"f4", view(st, DType::F4_E2M1FN_X2, {2}, {1})}, {"__metadata__", ok},
      {"bad\xed\xa0\x80", ok}, {"kept", ok}, {"kept", ok}};
  auto r = ptread::save_safetensors(out.path, items);
  CHECK(r.code() == ErrorCode::unsupported_tensor);
  CHECK(r.error().str().find("'c128'") != std::string::npos);
  CHECK_FALSE(ptread_test::path_exists(out.path));
  CHECK(ptread::save_safetensors(out.path, std::vector<ptread::NamedTensor>{{"__metadata__", ok}}).code() ==
        ErrorCode::invalid_argument);
  ptread::SaveSafetensorsOptions o;
  o.skip_unsupported = true;
  r = ptread::save_safetensors(out.path, items, o);
  REQUIRE(r.ok());
  CHECK(r->tensors == 1);
  REQUIRE(r->skipped.size() == 7);
  CHECK(r->skipped[0].reason == "dtype C128 has no safetensors equivalent");
  CHECK(r->skipped[3].reason == "dtype F4_E2M1FN_X2 has no safetensors equivalent");
  CHECK(r->skipped[4].reason == "the name is reserved in safetensors");
  CHECK(r->skipped[5].reason == "the name is not valid UTF-8");
  CHECK(r->skipped[6].reason == "an earlier tensor has the same name");
  const Safetensors file = read_safetensors(out.path);
  CHECK(file.header.size() == 1);
  CHECK(file.header.contains("kept"));
  o.metadata = {{"k", "v"}, {"k", "w"}};
  CHECK(ptread::save_safetensors(out.path, items, o).code() == ErrorCode::invalid_argument);
}

TEST_CASE("a stride-0 view that stands for more bytes than the disk holds is refused before writing", "[save]") {
  TempPath out("huge.safetensors");
  auto st = pattern(4);
  // 2^50 float32 elements (4 PiB) over one element: safetensors would store them all.
  const Tensor huge = view(st, DType::F32, {int64_t{1} << 25, int64_t{1} << 25}, {0, 0});
  auto r = ptread::save_safetensors(out.path, std::vector<ptread::NamedTensor>{{"huge", huge}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.code() == ErrorCode::io_error);
  CHECK(r.error().str().find("free") != std::string::npos);
  CHECK_FALSE(ptread_test::path_exists(out.path));
  CHECK_FALSE(ptread_test::path_exists(out.path + ".tmp"));
  // save_pt keeps the view a view: one element of storage.
  TempPath pt("huge.pt");
  auto p = ptread::save_pt(pt.path, std::vector<ptread::NamedTensor>{{"huge", huge}});
  REQUIRE(p.ok());
  auto back = reopen(pt.path);
  REQUIRE(back.tensors().size() == 1);
  CHECK(back.tensors()[0].tensor.numel() == int64_t{1} << 50);
  CHECK(back.tensors()[0].tensor.storage()->nbytes() == 4);
}

TEST_CASE("the torch-written fixtures, re-saved with save_pt, read as torch read them", "[save]") {
  // torch 1.13's (generate.py) and torch 2.x's (gen_torch2.py, torch2/)
  for (const std::string& dir : {ptread_test::fixture_dir(), ptread_test::torch2_dir()}) {
    const ptread_test::Json& files = ptread_test::cached_json(dir + "/expected.json")["files"];
    for (const auto& f : files.as_object()) {
      INFO(dir << "/" << f.first);
      auto src = ptread::Checkpoint::open(dir + "/" + f.first);
      if (!src && src.code() == ErrorCode::zip_unsupported_compression) continue;  // deflate.pt without zlib
      REQUIRE(src.ok());
      TempPath out("fixture.pt");
      auto r = ptread::save_pt(out.path, src->tensors());
      INFO((r ? "" : r.error().str()));
      const ptread_test::Json& want = f.second["tensors"];
      std::set<std::string> names;
      bool repeated = false;  // torch's result names two tensors alike (dict_keys.pt: two NaN keys)
      for (size_t k = 0; k < want.size(); ++k) repeated = !names.insert(want[k]["name"].as_string()).second || repeated;
      if (repeated) {  // a state dict cannot hold both: refused, naming the name
        REQUIRE_FALSE(r.ok());
        CHECK(r.code() == ErrorCode::invalid_argument);
        CHECK(r.error().str().find("two tensors are named") != std::string::npos);
        CHECK_FALSE(ptread_test::path_exists(out.path));
        continue;
      }
      REQUIRE(r.ok());
      auto ck = reopen(out.path);
      if (src->tensors().size() != want.size()) continue;  // TorchScript without zlib lists extras (tested elsewhere)
      REQUIRE(ck.tensors().size() == want.size());
      std::map<int64_t, const ptread::Storage*> group;
      size_t own = 0;  // tensors with the conj or neg bit: a record of their own, the bit applied
      for (size_t k = 0; k < want.size(); ++k) {
        const ptread_test::Json& e = want[k];
        const ptread::Tensor& t = ck.tensors()[k].tensor;
        ptread_test::check_tensor_entry(ck.tensors()[k], e);
        CHECK(ptread_test::shape_str(t.strides()) == ptread_test::shape_str(e["strides"]));
        CHECK(t.storage_offset() == e["storage_offset"].as_int());
        if (src->tensors()[k].tensor.is_conj() || src->tensors()[k].tensor.is_neg()) {
          CHECK_FALSE((t.is_conj() || t.is_neg()));
          ++own;
          continue;
        }
        // torch's storage groups: one Storage each (numpy arrays and quantized parts aside)
        auto g = group.emplace(e["storage_group"].as_int(), t.storage().get());
        CHECK(g.first->second == t.storage().get());
      }
      CHECK(r->storages == group.size() + own);
    }
  }
}

// Run by tests/writers/check_writers.py (hidden): PTREAD_SAVE_SRC re-saved to
// PTREAD_SAVE_OUT with every ZIP64 field, for torch to read.
TEST_CASE("save_pt with forced ZIP64 for the torch tier", "[.save_zip64]") {
  const char* src = std::getenv("PTREAD_SAVE_SRC");
  const char* out = std::getenv("PTREAD_SAVE_OUT");
  REQUIRE(src != nullptr);
  REQUIRE(out != nullptr);
  auto ck = reopen(src);
  ptread::SavePtOptions o;
  o.force_zip64 = true;
  auto r = ptread::save_pt(out, ck.tensors(), o);
  INFO((r ? "" : r.error().str()));
  REQUIRE(r.ok());
}
