// The adversarial corpus (tests/data/adversarial, written by its make.py): truncated,
// hostile and malformed checkpoints. Every file is opened in each load mode (mmap, read,
// memory) and must give exactly the ErrorCode expected.json names for it, with a message
// that starts with that code's tag; files expected "ok" look hostile but are valid: they
// must open, and every tensor must materialize (copy_to, to_float32) from memory that is
// aligned for its dtype. Nothing may crash, hang or allocate without bound: the sanitizer
// stage runs this too.
#include <catch2/catch.hpp>

#include "support/helpers.hpp"

#include <algorithm>
#include <cstdint>
#include <dirent.h>
#include <exception>
#include <string>
#include <vector>

using namespace ptread_test;

// AddressSanitizer aborts on an allocation too large to make instead of failing it.
#if defined(__SANITIZE_ADDRESS__)
#define ADVERSARIAL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ADVERSARIAL_ASAN 1
#endif
#endif

namespace {

const Json& adversarial_expected() { return cached_json(adversarial_dir() + "/expected.json"); }

// The ErrorCode named `name` (error_code_name's spelling); false when none is.
bool code_named(const std::string& name, ptread::ErrorCode* out) {
  for (int c = 0; c < 1000; ++c) {
    const auto code = static_cast<ptread::ErrorCode>(c);
    if (name == ptread::error_code_name(code)) {
      *out = code;
      return true;
    }
  }
  return false;
}

// What a file must give in this build: deflated records need zlib.
std::string expected_for(const std::string& file, const std::string& listed) {
#if !PTREAD_WITH_ZLIB
  if (file.compare(0, 8, "deflate_") == 0) return "zip_unsupported_compression";
#endif
  (void)file;
  return listed;
}

bool is_float_convertible(ptread::DType t) {
  using ptread::DType;
  return !ptread::dtype_is_complex(t) && t != DType::QUINT4X2 && t != DType::QUINT2X4 && !ptread::dtype_is_opaque(t);
}

// A bounded walk of the object tree: at most 64 levels, 64 items a container and 100000
// nodes in all (graphs may share and cycle), and no repr (big integers and key reprs are
// what some files attack; the naming walk at open has already been through them).
void walk(const ptread::Value& v, int depth, size_t* budget) {
  if (depth > 64 || *budget == 0) return;
  --*budget;
  (void)v.kind();
  (void)v.class_name();
  const size_t n = std::min<size_t>(v.size(), 64);
  for (size_t k = 0; k < n; ++k) {
    if (v.is_dict()) {
      (void)v.key(k).kind();
      walk(v.value(k), depth + 1, budget);
    } else {
      walk(v[k], depth + 1, budget);
    }
  }
  if (v.is_tensor()) CHECK(v.as_tensor().ok());
}

// Every tensor of a file that must read: its byte count is representable, its data is
// aligned for its dtype, and it copies out (or, too big to copy here, refuses a small
// destination with an error instead of writing past it).
void materialize(const ptread::Checkpoint& ck) {
  constexpr uint64_t kCopyCap = uint64_t{256} << 20;
  for (const auto& nt : ck.tensors()) {
    const ptread::Tensor& t = nt.tensor;
    INFO("tensor '" << nt.name << "' " << ptread::dtype_name(t.dtype()) << shape_str(t.shape()));
    uint64_t bytes = 0;
    const bool overflow = __builtin_mul_overflow(static_cast<uint64_t>(t.numel()), t.element_size(), &bytes);
    CHECK_FALSE(overflow);
    if (overflow) continue;
    CHECK(t.nbytes() == bytes);
    if (t.numel() > 0) {
      const size_t align = std::min<size_t>(t.element_size(), 8);
      INFO("data at " << t.data_ptr() << ": data<T>() must give a pointer aligned for T");
      CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % align == 0);
    }
    if (bytes > kCopyCap) {
      std::vector<unsigned char> small(16);
      const ptread::Status st = t.copy_to(small.data(), small.size());
      CHECK(st.code() == ptread::ErrorCode::invalid_argument);
#if PTREAD_EXCEPTIONS && !defined(ADVERSARIAL_ASAN)
      // Too big for memory: an error, never an exception (the core does not throw).
      if (is_float_convertible(t.dtype())) {
        std::string thrown;
        bool failed = false;
        try {
          failed = !t.to_float32().ok();
        } catch (const std::exception& e) {
          thrown = e.what();
        }
        INFO("to_float32() of " << bytes << " bytes threw " << thrown);
        CHECK(thrown.empty());
        if (thrown.empty()) CHECK(failed);
      }
#endif
      continue;
    }
    std::vector<unsigned char> buf(static_cast<size_t>(bytes) + 1, 0xa5);
    const ptread::Status st = t.copy_to(buf.data(), static_cast<size_t>(bytes));
    INFO((st.ok() ? std::string() : st.error().str()));
    CHECK(st.ok());
    CHECK(buf.back() == 0xa5);  // nothing written past the size asked for
    if (is_float_convertible(t.dtype())) {
      auto f = t.to_float32();
      INFO((f.ok() ? std::string() : f.error().str()));
      CHECK(f.ok());
      if (f.ok()) CHECK(f->size() == static_cast<size_t>(t.numel()));
    }
  }
  size_t budget = 100000;
  walk(ck.root(), 0, &budget);
}

void check_file(const std::string& file, const std::string& want) {
  ptread::ErrorCode want_code = ptread::ErrorCode::ok;
  INFO("file " << file << ": expected " << want);
  REQUIRE(code_named(want, &want_code));
  const ptread::LoadMode modes[] = {ptread::LoadMode::mmap, ptread::LoadMode::read, ptread::LoadMode::memory};
  for (const ptread::LoadMode mode : modes) {
    INFO("mode " << ptread::load_mode_name(mode));
    std::vector<unsigned char> keep;
    auto ck = open_in_mode(adversarial_dir() + "/" + file, mode, &keep);
    const std::string got = ptread::error_code_name(ck.code());
    INFO("got " << got << (ck.ok() ? std::string() : ": " + ck.error().str()));
    CHECK(got == want);
    if (!ck.ok()) {
      const std::string& line = ck.error().str();
      CHECK(line.compare(0, error_tag(ck.code()).size(), error_tag(ck.code())) == 0);
      CHECK(!ck.error().message().empty());
    } else if (want_code == ptread::ErrorCode::ok) {
      materialize(*ck);
    }
    // A file that opens although it should not is left alone: materializing what the
    // reader should have refused could crash the suite instead of failing one check.
  }
}

std::vector<std::string> corpus_files() {
  std::vector<std::string> out;
  if (DIR* d = opendir(adversarial_dir().c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 3 && n.compare(n.size() - 3, 3, ".pt") == 0) out.push_back(n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("adversarial corpus: the expected list and the files agree", "[adversarial]") {
  const Json& exp = adversarial_expected();
  REQUIRE(exp.is_object());
  const std::vector<std::string> files = corpus_files();
  CHECK(files.size() >= 40);
  uint64_t total = 0;
  for (const auto& f : files) {
    INFO(f);
    CHECK(exp.contains(f));  // every file has an expectation
    total += read_file(adversarial_dir() + "/" + f).size();
    ptread::ErrorCode code;
    CHECK(code_named(exp[f].as_string(), &code));
  }
  CHECK(exp.size() == files.size());  // and every expectation a file
  CHECK(total < (uint64_t{5} << 19));  // under 2.5 MB
}

TEST_CASE("adversarial corpus: each file gives its expected code in every load mode", "[adversarial]") {
  const std::vector<std::string> files = corpus_files();
  REQUIRE(!files.empty());
  const Json& exp = adversarial_expected();
  for (const auto& f : files) {
    if (!exp.contains(f)) continue;  // reported by the test above
    check_file(f, expected_for(f, exp[f].as_string()));
  }
}

namespace {

template <class List>
const typename List::value_type* named(const List& list, const std::string& name) {
  for (const auto& e : list) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

// One tensor of torch_tensors.json (what torch.load gave) against the checkpoint's.
void check_torch_tensor(const ptread::Checkpoint& ck, const Json& e) {
  const std::string name = e["name"].as_string();
  const std::string kind = e["kind"].as_string();
  INFO("tensor '" << name << "' (" << kind << ")");
  std::string err;
  if (kind == "dense") {
    const ptread::NamedTensor* nt = named(ck.tensors(), name);
    REQUIRE(nt != nullptr);
    check_tensor_entry(*nt, e);
    CHECK(shape_str(nt->tensor.strides()) == shape_str(e["strides"]));
    CHECK(nt->tensor.requires_grad() == e["requires_grad"].as_bool());
    CHECK(e["requires_grad"].is_bool());
  } else if (kind == "quantized") {
    const ptread::NamedQuantized* q = named(ck.quantized(), name);
    REQUIRE(q != nullptr);
    CHECK(std::string(ptread::dtype_name(q->tensor.dtype)) == e["dtype"].as_string());
    CHECK(shape_str(q->tensor.shape) == shape_str(e["shape"]));
    CHECK(shape_str(q->tensor.int_repr.strides()) == shape_str(e["strides"]));
    CHECK(q->tensor.qscheme == ptread::QScheme::per_tensor_affine);
    CHECK(q->tensor.scale == e["scale"].as_double());
    CHECK(q->tensor.zero_point == e["zero_point"].as_int());
    CHECK(tensor_sha256(q->tensor.int_repr, &err) == e["int_repr_sha256"].as_string());
  } else {
    REQUIRE((kind == "sparse" || kind == "sparse_csr"));
    const ptread::NamedSparse* s = named(ck.sparse(), name);
    REQUIRE(s != nullptr);
    CHECK(std::string(ptread::dtype_name(s->tensor.dtype())) == e["dtype"].as_string());
    CHECK(shape_str(s->tensor.shape) == shape_str(e["shape"]));
    CHECK(shape_str(s->tensor.values.shape()) == shape_str(e["values_shape"]));
    CHECK(tensor_sha256(s->tensor.values, &err) == e["values_sha256"].as_string());
    if (kind == "sparse") {
      CHECK(s->tensor.layout == ptread::SparseLayout::coo);
      CHECK(tensor_sha256(s->tensor.indices, &err) == e["indices_sha256"].as_string());
    } else {
      CHECK(s->tensor.layout == ptread::SparseLayout::csr);
      CHECK(tensor_sha256(s->tensor.compressed_indices, &err) == e["crow_indices_sha256"].as_string());
      CHECK(tensor_sha256(s->tensor.plain_indices, &err) == e["col_indices_sha256"].as_string());
    }
  }
  CHECK(err.empty());
}

}  // namespace

TEST_CASE("adversarial corpus: the files torch reads give torch's tensors, bit for bit", "[adversarial]") {
  // torch_tensors.json: what torch.load gave for each file of torch.json it reads
  // (check_torch.py --write; the test adversarial_torch checks it against torch).
  const Json& rec = cached_json(adversarial_dir() + "/torch_tensors.json");
  const Json& files = rec["files"];
  const Json& claims = cached_json(adversarial_dir() + "/torch.json");
  size_t reads = 0;
  for (const auto& c : claims.as_object()) {
    if (c.second.as_string() != "reads") continue;
    ++reads;
    const std::string& f = c.first;
    INFO("file " << f);
    CHECK((files.contains(f) || rec["no_values"].contains(f)));
  }
  CHECK(files.size() >= 13);
  CHECK(files.size() + rec["no_values"].size() == reads);
  const ptread::LoadMode modes[] = {ptread::LoadMode::mmap, ptread::LoadMode::read, ptread::LoadMode::memory};
  for (const auto& file : files.as_object()) {
    const std::string& f = file.first;
    for (const ptread::LoadMode mode : modes) {
      INFO("file " << f << ", mode " << ptread::load_mode_name(mode));
      std::vector<unsigned char> keep;
      auto ck = open_in_mode(adversarial_dir() + "/" + f, mode, &keep);
      INFO((ck.ok() ? std::string() : ck.error().str()));
      REQUIRE(ck.ok());
      const Json& list = file.second;
      CHECK(ck->tensors().size() + ck->quantized().size() + ck->sparse().size() == list.size());
      for (size_t k = 0; k < list.size(); ++k) check_torch_tensor(*ck, list[k]);
    }
  }
}
