// ptread — the command-line tool (DESIGN.md "Command line", contract).
//
//   ptread ls [--json] FILE              tensors: name, dtype, shape, stored device, bytes
//   ptread tree FILE                     the object tree with metadata
//   ptread export FILE OUT.safetensors   every tensor safetensors can hold
//   ptread convert FILE OUT.pt [--dtype D] [--prefix P] [--strip-prefix P]
//                                        a state dict torch.load(weights_only=True) reads
//   ptread audit [--json] FILE           the globals torch.load would import, and which
//                                        torch.load(weights_only=True) would refuse
//
// Exit status: 0 done, 1 the file could not be read (or the output written), 2 wrong usage,
// 3 (audit) torch.load(weights_only=False) would import something it cannot vouch for.
// Output is built in one string and written once: listing 100,000 tensors must stay fast.
#include "ptread/ptread.hpp"
#include "progress.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace {

constexpr int kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitUnsafe = 3;

const char kUsage[] =
    "usage: ptread <command> [options] FILE...\n"
    "\n"
    "Reads PyTorch checkpoints (.pt, .pth, .bin, .ckpt) without Python or LibTorch.\n"
    "\n"
    "commands:\n"
    "  ls FILE                      list the tensors: name, dtype, shape, device, bytes\n"
    "  ls --json FILE               the same as JSON\n"
    "  tree FILE                    the object tree with its metadata\n"
    "  export FILE OUT.safetensors  write every tensor safetensors can hold\n"
    "  convert FILE OUT.pt          write the tensors as a state dict (zip format) that\n"
    "                               torch.load(OUT.pt, weights_only=True) reads\n"
    "  audit FILE                   the globals torch.load would import; those\n"
    "                               torch.load(weights_only=True) refuses are marked\n"
    "\n"
    "options:\n"
    "  --json                       (ls, audit) print JSON\n"
    "  --mode mmap|read             map the file (default) or read it into memory\n"
    "  --dtype F16|BF16|F32|F64     (convert) write floating tensors as this dtype;\n"
    "                               integer, bool and complex tensors stay as they are\n"
    "  --prefix P                   (convert) only the tensors named P or P.*\n"
    "  --strip-prefix P             (convert) remove a leading 'P.' from the names\n"
    "  -h, --help                   print this help\n"
    "  --version                    print the version\n"
    "\n"
    "exit status: 0 done, 1 the file could not be read or written, 2 wrong usage,\n"
    "             3 (audit) a global torch.load(weights_only=True) would refuse\n";

// ---- output helpers ----

bool write_out(std::FILE* f, const std::string& s) {
  if (!s.empty() && std::fwrite(s.data(), 1, s.size(), f) != s.size()) return false;
  return std::fflush(f) == 0;
}

int finish_stdout(const std::string& s) {
  if (!write_out(stdout, s)) {
    std::fprintf(stderr, "ptread: cannot write the output: %s\n", std::strerror(errno));
    return kExitFailed;
  }
  return kExitOk;
}

void append_u64(std::string& out, uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(v));
  out += buf;
}

void append_i64(std::string& out, int64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  out += buf;
}

// "[4, 3]"; "[]" for a scalar.
void append_dims(std::string& out, ptread::Dims dims, const char* sep = ", ") {
  out += '[';
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d) out += sep;
    append_i64(out, dims[d]);
  }
  out += ']';
}

using ptread_cli::human_bytes;

using ptread::detail::append_json_string;
using ptread::detail::is_surrogate;
using ptread::detail::utf8_next;

// Terminal columns of a code point: 0 for combining marks, 2 for East Asian wide and
// emoji, else 1 (a small wcwidth, enough to keep the ls table aligned).
size_t cp_columns(uint32_t cp) {
  if ((cp >= 0x300 && cp <= 0x36f) || (cp >= 0x200b && cp <= 0x200f) || (cp >= 0xfe00 && cp <= 0xfe0f)) return 0;
  if ((cp >= 0x1100 && cp <= 0x115f) || (cp >= 0x2e80 && cp <= 0x303e) || (cp >= 0x3041 && cp <= 0xa4cf) ||
      (cp >= 0xac00 && cp <= 0xd7a3) || (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0xfe30 && cp <= 0xfe4f) ||
      (cp >= 0xff00 && cp <= 0xff60) || (cp >= 0xffe0 && cp <= 0xffe6) || (cp >= 0x1f300 && cp <= 0x1f64f) ||
      (cp >= 0x1f900 && cp <= 0x1f9ff) || (cp >= 0x20000 && cp <= 0x3fffd)) {
    return 2;
  }
  return 1;
}

// Text for a terminal line: control characters and bytes that are no valid UTF-8 escaped
// as \xNN (as Python's backslashreplace does); the empty name shown as "".
std::string display(std::string_view s) {
  if (s.empty()) return "\"\"";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t len = utf8_next(s, i, &cp);
    if (len == 0 || cp < 0x20 || cp == 0x7f || is_surrogate(cp)) {
      const size_t n = len == 0 ? 1 : len;
      for (size_t k = 0; k < n; ++k) {
        char e[8];
        std::snprintf(e, sizeof e, "\\x%02x", static_cast<unsigned char>(s[i + k]));
        out += e;
      }
      i += n;
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  return out;
}

// Columns a display()ed string takes on a terminal.
size_t columns(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t len = utf8_next(s, i, &cp);
    n += len == 0 ? 1 : cp_columns(cp);
    i += len == 0 ? 1 : len;
  }
  return n;
}

void pad_to(std::string& out, size_t have, size_t width) {
  if (have < width) out.append(width - have, ' ');
}

std::string tensor_label(const ptread::Tensor& t) {
  std::string s = ptread::dtype_name(t.dtype());
  append_dims(s, t.shape());
  if (t.device() != "cpu") s += " " + t.device();
  return s;
}

// ---- command line ----

struct Args {
  std::string command;
  std::vector<std::string> files;
  bool json = false;
  ptread::LoadMode mode = ptread::LoadMode::mmap;
  // convert
  std::optional<ptread::DType> dtype;
  std::optional<std::string> prefix, strip_prefix;
};

int usage_error(const std::string& why) {
  if (!why.empty()) std::fprintf(stderr, "ptread: %s\n", why.c_str());
  std::fputs(kUsage, stderr);
  return kExitUsage;
}

// Returns -1 when the command should run, else the exit status.
int parse_args(int argc, char** argv, Args* args) {
  std::vector<std::string> positional;
  std::string error, value;
  bool help = false, version = false, options_done = false;
  int i = 1;
  // "--name VALUE" or "--name=VALUE": true when `a` is the option, with *out its value.
  auto option_value = [&](const std::string& a, const std::string& name, std::string* out) {
    if (a.compare(0, name.size() + 1, name + "=") == 0) {
      *out = a.substr(name.size() + 1);
      return true;
    }
    if (a != name) return false;
    if (i + 1 < argc) {
      *out = argv[++i];
    } else {
      out->clear();
      if (error.empty()) error = name + " needs a value";
    }
    return true;
  };
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (options_done || a.size() < 2 || a[0] != '-') {
      positional.push_back(a);
    } else if (a == "--") {
      options_done = true;
    } else if (a == "-h" || a == "--help") {
      help = true;
    } else if (a == "--version") {
      version = true;
    } else if (a == "--json") {
      args->json = true;
    } else if (option_value(a, "--mode", &value)) {
      if (value == "mmap") {
        args->mode = ptread::LoadMode::mmap;
      } else if (value == "read") {
        args->mode = ptread::LoadMode::read;
      } else if (error.empty()) {
        error = "unknown mode '" + value + "' (use mmap or read)";
      }
    } else if (option_value(a, "--dtype", &value)) {
      std::string upper = value;
      for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      ptread::DType d;
      if (ptread::dtype_from_name(upper, &d) && ptread::detail::is_float_dtype(d)) {
        args->dtype = d;
      } else if (error.empty()) {
        error = "unknown --dtype '" + value + "' (use F16, BF16, F32 or F64)";
      }
    } else if (option_value(a, "--prefix", &value)) {
      args->prefix = value;
    } else if (option_value(a, "--strip-prefix", &value)) {
      args->strip_prefix = value;
    } else if (error.empty()) {
      error = "unknown option '" + a + "'";
    }
  }
  if (help || (!positional.empty() && positional[0] == "help")) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (version) {
    std::printf("ptread %s\n", PTREAD_VERSION_STRING);
    return kExitOk;
  }
  if (!error.empty()) return usage_error(error);
  if (positional.empty()) return usage_error("");
  args->command = positional[0];
  args->files.assign(positional.begin() + 1, positional.end());
  size_t want = 0;
  if (args->command == "ls" || args->command == "tree" || args->command == "audit") {
    want = 1;
  } else if (args->command == "export" || args->command == "convert") {
    want = 2;
  } else {
    return usage_error("unknown command '" + args->command + "'");
  }
  if (args->json && args->command != "ls" && args->command != "audit") return usage_error("--json is an option of ls and audit");
  if ((args->dtype || args->prefix || args->strip_prefix) && args->command != "convert") {
    return usage_error("--dtype, --prefix and --strip-prefix are options of convert");
  }
  if (args->files.size() != want) {
    return usage_error(args->command + (want == 1                       ? " takes one FILE"
                                        : args->command == "export" ? " takes FILE and OUT.safetensors"
                                                                    : " takes FILE and OUT.pt"));
  }
  return -1;
}

// ---- ls ----

std::string ls_json(const ptread::Checkpoint& ck) {
  std::string out;
  const size_t n = ck.tensor_count();  // metadata only: no Tensor is made
  out.reserve(128 + n * 128);
  out += "{\n  \"format\": ";
  append_json_string(out, ck.format_name());
  out += ",\n  \"tensors\": [";
  for (size_t k = 0; k < n; ++k) {
    const ptread::TensorInfo t = ck.tensor_info(k);
    out += k ? ",\n    {\"name\": " : "\n    {\"name\": ";
    append_json_string(out, t.name);
    out += ", \"dtype\": \"";
    out += ptread::dtype_name(t.dtype);
    out += "\", \"shape\": ";
    append_dims(out, t.shape);
    out += ", \"strides\": ";
    append_dims(out, t.strides);
    out += ", \"device\": ";
    append_json_string(out, t.device);
    out += ", \"nbytes\": ";
    append_u64(out, t.nbytes);
    out += '}';
  }
  out += n == 0 ? "],\n" : "\n  ],\n";
  const auto& unsupported = ck.unsupported();
  out += "  \"unsupported\": [";
  for (size_t k = 0; k < unsupported.size(); ++k) {
    out += k ? ",\n    {\"name\": " : "\n    {\"name\": ";
    append_json_string(out, unsupported[k].name);
    out += ", \"reason\": ";
    append_json_string(out, unsupported[k].reason);
    out += '}';
  }
  out += unsupported.empty() ? "],\n" : "\n  ],\n";
  out += "  \"quantized\": [";
  for (size_t k = 0; k < ck.quantized().size(); ++k) {
    const auto& q = ck.quantized()[k];
    out += k ? ",\n    {\"name\": " : "\n    {\"name\": ";
    append_json_string(out, q.name);
    out += ", \"dtype\": \"";
    out += ptread::dtype_name(q.tensor.dtype);
    out += "\", \"shape\": ";
    append_dims(out, q.tensor.shape);
    out += ", \"qscheme\": \"";
    out += ptread::qscheme_name(q.tensor.qscheme);
    out += "\", \"device\": ";
    append_json_string(out, q.tensor.int_repr.device());
    out += ", \"nbytes\": ";
    append_u64(out, q.tensor.int_repr.nbytes());
    out += '}';
  }
  out += ck.quantized().empty() ? "],\n" : "\n  ],\n";
  out += "  \"sparse\": [";
  for (size_t k = 0; k < ck.sparse().size(); ++k) {
    const auto& sp = ck.sparse()[k];
    out += k ? ",\n    {\"name\": " : "\n    {\"name\": ";
    append_json_string(out, sp.name);
    out += ", \"layout\": \"";
    out += ptread::sparse_layout_name(sp.tensor.layout);
    out += "\", \"dtype\": \"";
    out += ptread::dtype_name(sp.tensor.dtype());
    out += "\", \"shape\": ";
    append_dims(out, sp.tensor.shape);
    out += '}';
  }
  out += ck.sparse().empty() ? "],\n" : "\n  ],\n";
  out += "  \"modules\": [";
  for (size_t k = 0; k < ck.modules().size(); ++k) {
    out += k ? ",\n    {\"name\": " : "\n    {\"name\": ";
    append_json_string(out, ck.modules()[k].name);
    out += ", \"class\": ";
    append_json_string(out, ck.modules()[k].class_name);
    out += '}';
  }
  out += ck.modules().empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

// Names and devices that print as they are: printable ASCII, not empty (display() and
// columns() of them are the text and its length). Anything else takes the general path.
bool plain_ascii(std::string_view s) {
  if (s.empty()) return false;
  const char* p = s.data();
  size_t n = s.size();
  // A word at a time: a byte below 0x20 borrows into its high bit, one above 0x7e carries
  // into it (or has it set already). A borrow or carry can only spill into the next byte
  // from a byte that fails on its own. The last word of a text may overlap the one before.
  auto bad8 = [](const char* q) {
    constexpr uint64_t kOnes = 0x0101010101010101u, kHighs = 0x8080808080808080u;
    uint64_t w;
    std::memcpy(&w, q, 8);
    return (((w - 0x20 * kOnes) | (w + kOnes) | w) & kHighs) != 0;
  };
  auto bad4 = [](const char* q) {
    constexpr uint32_t kOnes = 0x01010101u, kHighs = 0x80808080u;
    uint32_t w;
    std::memcpy(&w, q, 4);
    return (((w - 0x20 * kOnes) | (w + kOnes) | w) & kHighs) != 0;
  };
  if (n >= 8) {
    for (; n > 8; p += 8, n -= 8) {
      if (bad8(p)) return false;
    }
    return !bad8(p + n - 8);
  }
  if (n >= 4) return !bad4(p) && !bad4(p + n - 4);
  for (; n; ++p, --n) {
    if (*p < 0x20 || *p > 0x7e) return false;
  }
  return true;
}

size_t decimal_len(uint64_t v) {
  size_t n = 1;
  for (; v >= 10000; v /= 10000) n += 4;  // (compares, not a division per digit, for the usual sizes)
  return n + (v >= 10) + (v >= 100) + (v >= 1000);
}
size_t decimal_len(int64_t v) {
  return v < 0 ? 1 + decimal_len(0 - static_cast<uint64_t>(v)) : decimal_len(static_cast<uint64_t>(v));
}

// Length of append_dims(dims) with ", " between the dimensions.
template <class Dims>
size_t dims_len(const Dims& dims) {
  size_t n = 2;
  for (size_t d = 0; d < dims.size(); ++d) n += decimal_len(static_cast<int64_t>(dims[d])) + (d ? 2 : 0);
  return n;
}

// The ls table rows, written straight into a buffer that is flushed to a FILE whenever
// the next row might not fit: it stays small and in cache, so listing 100,000 tensors
// costs little more than reading them.
class TableWriter {
 public:
  explicit TableWriter(std::FILE* f) : f_(f), buf_(kChunk), p_(buf_.data()) {}
  // Room for n more bytes (writes out what the buffer holds when needed).
  PTREAD_ALWAYS_INLINE void reserve(size_t n) {
    if (n + kSlack > static_cast<size_t>(buf_.data() + buf_.size() - p_)) make_room(n + kSlack);
  }
  void flush() {
    const size_t n = static_cast<size_t>(p_ - buf_.data());
    if (n && std::fwrite(buf_.data(), 1, n, f_) != n) ok_ = false;
    p_ = buf_.data();
  }
  bool ok() const { return ok_; }
  char* pos() const { return p_; }
  // Short texts (names, dtypes, devices, tails: most are) are copied with two overlapping
  // moves of a fixed size, inline, rather than by a call to memcpy.
  PTREAD_ALWAYS_INLINE void text(const char* s, size_t n) {
    if (n > 32) {
      std::memcpy(p_, s, n);
    } else if (n > 16) {  // (an ls row's tail, usually)
      copy_ends<Bytes16>(s, n);
    } else if (n >= 8) {
      copy_ends<uint64_t>(s, n);
    } else if (n >= 4) {
      copy_ends<uint32_t>(s, n);
    } else if (n != 0) {
      p_[0] = s[0];
      p_[n / 2] = s[n / 2];
      p_[n - 1] = s[n - 1];
    }
    p_ += n;
  }
  void text(std::string_view s) { text(s.data(), s.size()); }
  // Spaces up to `width` columns. Writes whole blocks of 16: reserve() keeps kSlack bytes
  // past what it was asked for, and later text overwrites the excess.
  void pad(size_t have, size_t width) {
    if (have < width) {
      static const char spaces[16] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
      const size_t n = width - have;
      for (size_t k = 0; k < n; k += 16) std::memcpy(p_ + k, spaces, 16);
      p_ += n;
    }
  }
  template <class T>
  void number(T v) {
    p_ = std::to_chars(p_, p_ + 24, v).ptr;
  }
  template <class Dims>
  void dims(const Dims& d) {
    *p_++ = '[';
    for (size_t k = 0; k < d.size(); ++k) {
      if (k) text(", ", 2);
      number(static_cast<int64_t>(d[k]));
    }
    *p_++ = ']';
  }

 private:
  struct Bytes16 {
    char b[16];
  };
  PTREAD_NOINLINE void make_room(size_t n) {
    flush();
    if (n > buf_.size()) {
      buf_.resize(n);
      p_ = buf_.data();
    }
  }
  template <class W>  // sizeof(W) <= n <= 2 * sizeof(W)
  void copy_ends(const char* s, size_t n) {
    W head, tail;
    std::memcpy(&head, s, sizeof(W));
    std::memcpy(&tail, s + n - sizeof(W), sizeof(W));
    std::memcpy(p_, &head, sizeof(W));
    std::memcpy(p_ + n - sizeof(W), &tail, sizeof(W));
  }

  static constexpr size_t kChunk = size_t{1} << 18;
  static constexpr size_t kSlack = 16;
  std::FILE* f_;
  std::vector<char> buf_;
  char* p_;
  bool ok_ = true;
};

// The part of an ls row after the name (dtype, shape, device and bytes, padded, and the
// newline) follows from the dtype, shape and device alone. Checkpoints with many tensors
// repeat a few of those (a layer's tensors, layer after layer), so each is measured and
// formatted once and copied after that. The first pass finds each row's tail through a
// direct-mapped cache of the tails seen (a miss: a slot another tail took, or a shape of
// more than kRank dimensions, makes a new tail or none) and records its number; the
// second pass copies tails by that number, without looking at the tensor again.
class RowTails {
 public:
  static constexpr uint32_t kRank = 8;
  static constexpr uint32_t kNone = 0x7fffffff;  // no tail kept: the row is formatted anew
  RowTails() { std::fill(std::begin(slots_), std::end(slots_), kNone); }
  struct Tail {
    ptread::DType dtype = ptread::DType::F32;
    uint32_t rank = 0;
    int64_t dims[kRank] = {};
    std::string_view device;
    size_t shape_len = 0;  // dims_len(shape)
    std::string text;      // the formatted tail, once the widths are known ("" before)
  };
  // The number of this tensor's tail (*fresh: a tail not measured before), or kNone when
  // its shape has too many dimensions to be kept (or kMaxTails tails are kept already).
  uint32_t find(const ptread::TensorInfo& t, bool* fresh) {
    *fresh = true;
    const size_t rank = t.shape.size();
    if (rank > kRank) return kNone;
    uint64_t h = static_cast<uint64_t>(t.dtype) * 0x100000001b3u + rank + t.device.size();
    for (size_t d = 0; d < rank; ++d) h = (h ^ static_cast<uint64_t>(t.shape[d])) * 0x9e3779b97f4a7c15u;
    uint32_t& slot = slots_[(h >> 56) % kSlots];
    if (slot != kNone) {
      const Tail& e = tails_[slot];
      // (Tensors share their device text: the same bytes, usually; else the same text.)
      bool same = e.dtype == t.dtype && e.rank == rank &&
                  ((e.device.data() == t.device.data() && e.device.size() == t.device.size()) || e.device == t.device);
      for (size_t d = 0; same && d < rank; ++d) same = e.dims[d] == t.shape[d];  // (a memcmp call cost more)
      if (same) {
        *fresh = false;
        return slot;
      }
    }
    if (tails_.size() >= kMaxTails) return kNone;
    Tail e;
    e.dtype = t.dtype;
    e.rank = static_cast<uint32_t>(rank);
    std::copy(t.shape.begin(), t.shape.end(), e.dims);
    e.device = t.device;
    e.shape_len = dims_len(t.shape);
    tails_.push_back(std::move(e));
    slot = static_cast<uint32_t>(tails_.size() - 1);
    return slot;
  }
  Tail& operator[](uint32_t id) { return tails_[id]; }

 private:
  static constexpr size_t kSlots = 256;
  static constexpr size_t kMaxTails = size_t{1} << 16;  // then rows are formatted anew
  uint32_t slots_[kSlots];  // a tail's number, or kNone
  std::vector<Tail> tails_;
};

// Prints the table on stdout; returns the exit status.
int ls_table(const ptread::Checkpoint& ck) {
  const size_t n = ck.tensor_count();  // metadata only: no Tensor is made
  size_t dtype_len[ptread::kDTypeCount];
  for (int d = 0; d < ptread::kDTypeCount; ++d) dtype_len[d] = std::strlen(ptread::dtype_name(static_cast<ptread::DType>(d)));
  // First pass: the column widths.
  size_t w_name = 4, w_dtype = 5, w_shape = 5, w_device = 6, w_bytes = 5;
  uint64_t total = 0;
  // Per row: its tail's number (RowTails), and kPlain when its name is plain ASCII.
  constexpr uint32_t kPlain = 0x80000000u;
  std::vector<uint32_t> rows(n);
  // The columns of a device: tensors share a few device texts (the same bytes, usually
  // one text), so the last one's width is kept.
  std::string_view last_device;
  size_t last_device_cols = 0;
  auto device_cols = [&](std::string_view d) {
    if (d.data() != last_device.data() || d.size() != last_device.size()) {
      last_device = d;
      last_device_cols = plain_ascii(d) ? d.size() : columns(d);
    }
    return last_device_cols;
  };
  RowTails tails;
  for (size_t k = 0; k < n; ++k) {
    const ptread::TensorInfo t = ck.tensor_info(k);
    const bool plain = plain_ascii(t.name);
    if (plain) {
      w_name = std::max(w_name, t.name.size());
    } else {
      w_name = std::max(w_name, columns(display(t.name)));
    }
    bool fresh = false;
    const uint32_t id = tails.find(t, &fresh);
    rows[k] = id | (plain ? kPlain : 0);
    if (fresh) {  // (a tail seen before has its widths counted)
      w_dtype = std::max(w_dtype, dtype_len[static_cast<size_t>(t.dtype)]);
      w_shape = std::max(w_shape, id != RowTails::kNone ? tails[id].shape_len : dims_len(t.shape));
      w_device = std::max(w_device, device_cols(t.device));
      w_bytes = std::max(w_bytes, decimal_len(t.nbytes));
    }
    total += t.nbytes;
  }
  for (const auto& q : ck.quantized()) {  // their rows follow the tensors'
    w_name = std::max(w_name, columns(display(q.name)));
    w_dtype = std::max(w_dtype, dtype_len[static_cast<size_t>(q.tensor.dtype)]);
    w_shape = std::max(w_shape, dims_len(q.tensor.shape));
    w_device = std::max(w_device, columns(q.tensor.int_repr.device()));
    w_bytes = std::max(w_bytes, decimal_len(q.tensor.int_repr.nbytes()));
  }
  for (const auto& sp : ck.sparse()) {
    w_name = std::max(w_name, columns(display(sp.name)));
    w_dtype = std::max(w_dtype, dtype_len[static_cast<size_t>(sp.tensor.dtype())]);
    w_shape = std::max(w_shape, dims_len(sp.tensor.shape));
  }
  std::string out;  // the header, then the lines after the rows
  auto row = [&](const std::string& name, size_t name_cols, const char* dtype, const std::string& shape,
                 const std::string& device, const std::string& bytes) {
    out += name;
    pad_to(out, name_cols, w_name + 2);
    out += dtype;
    pad_to(out, std::strlen(dtype), w_dtype + 2);
    out += shape;
    pad_to(out, shape.size(), w_shape + 2);
    out += device;
    pad_to(out, columns(device), w_device + 2);
    pad_to(out, bytes.size(), w_bytes);
    out += bytes;
    out += '\n';
  };
  row("NAME", 4, "DTYPE", "SHAPE", "DEVICE", "BYTES");
  // Second pass: the rows. Each takes at most its name and device and the padded widths.
  TableWriter w(stdout);
  w.reserve(out.size());
  w.text(out);
  out.clear();
  const size_t widths = w_name + w_dtype + w_shape + w_device + w_bytes + 9;
  std::string shown;
  for (size_t k = 0; k < n; ++k) {
    const bool plain = (rows[k] & kPlain) != 0;
    const uint32_t id = rows[k] & ~kPlain;
    RowTails::Tail* tail = id != RowTails::kNone ? &tails[id] : nullptr;
    const bool copy = tail != nullptr && !tail->text.empty();  // the usual row: the name and a copy
    const std::string_view stored = ck.tensor_info(k).name;
    if (!plain) shown = display(stored);
    const std::string_view name = plain ? stored : std::string_view(shown);
    w.reserve(name.size() + w_name + 2 + (copy ? tail->text.size() : 0));
    w.text(name);
    w.pad(plain ? name.size() : columns(name), w_name + 2);
    if (copy) {
      w.text(tail->text);
      continue;
    }
    const ptread::TensorInfo t = ck.tensor_info(k);
    w.reserve(t.device.size() + widths);
    char* const tail_at = w.pos();
    const size_t dl = dtype_len[static_cast<size_t>(t.dtype)];
    w.text(ptread::dtype_name(t.dtype), dl);
    w.pad(dl, w_dtype + 2);
    char* shape_at = w.pos();
    w.dims(t.shape);
    w.pad(static_cast<size_t>(w.pos() - shape_at), w_shape + 2);
    w.text(t.device);
    w.pad(device_cols(t.device), w_device + 2);
    w.pad(decimal_len(t.nbytes), w_bytes);
    w.number(t.nbytes);
    w.text("\n", 1);
    if (tail != nullptr) tail->text.assign(tail_at, w.pos());
  }
  for (const auto& q : ck.quantized()) {  // dtype, logical shape, device, bytes of int_repr()
    const std::string name = display(q.name);
    out += name;
    pad_to(out, columns(name), w_name + 2);
    const char* dt = ptread::dtype_name(q.tensor.dtype);
    out += dt;
    pad_to(out, std::strlen(dt), w_dtype + 2);
    std::string shape;
    append_dims(shape, q.tensor.shape);
    out += shape;
    pad_to(out, shape.size(), w_shape + 2);
    out += q.tensor.int_repr.device();
    pad_to(out, columns(q.tensor.int_repr.device()), w_device + 2);
    const std::string b = std::to_string(q.tensor.int_repr.nbytes());
    pad_to(out, b.size(), w_bytes);
    out += b + "  quantized " + ptread::qscheme_name(q.tensor.qscheme) + "\n";
  }
  for (const auto& sp : ck.sparse()) {
    const std::string name = display(sp.name);
    out += name;
    pad_to(out, columns(name), w_name + 2);
    const char* dt = ptread::dtype_name(sp.tensor.dtype());
    out += dt;
    pad_to(out, std::strlen(dt), w_dtype + 2);
    std::string shape;
    append_dims(shape, sp.tensor.shape);
    out += shape;
    pad_to(out, shape.size(), w_shape + 2);
    out += sp.tensor.values.device();
    out += std::string("  sparse ") + ptread::sparse_layout_name(sp.tensor.layout) + ", " +
           std::to_string(sp.tensor.values.shape().size() ? sp.tensor.values.shape()[0] : 0) + " stored values\n";
  }
  const auto& unsupported = ck.unsupported();
  for (const auto& u : unsupported) {
    const std::string name = display(u.name);
    out += name;
    pad_to(out, columns(name), w_name + 2);
    out += "unsupported: " + display(u.reason) + "\n";
  }
  if (!ck.modules().empty()) {  // whole models and TorchScript: each module's class
    size_t w_mod = 6;
    for (const auto& m : ck.modules()) w_mod = std::max(w_mod, columns(display(m.name.empty() ? "(root)" : m.name)));
    out += "\nMODULE";
    pad_to(out, 6, w_mod + 2);
    out += "CLASS\n";
    for (const auto& m : ck.modules()) {
      const std::string name = display(m.name.empty() ? "(root)" : m.name);
      out += name;
      pad_to(out, columns(name), w_mod + 2);
      out += display(m.class_name) + "\n";
    }
    out += "\n";
  }
  out += std::to_string(n) + (n == 1 ? " tensor, " : " tensors, ");
  append_u64(out, total);
  out += total == 1 ? " byte" : " bytes";
  if (total >= 1024) out += " (" + human_bytes(total) + ")";
  if (!ck.quantized().empty()) out += ", " + std::to_string(ck.quantized().size()) + " quantized";
  if (!ck.sparse().empty()) out += ", " + std::to_string(ck.sparse().size()) + " sparse";
  if (!unsupported.empty()) out += ", " + std::to_string(unsupported.size()) + " unsupported";
  if (!ck.modules().empty()) out += ", " + std::to_string(ck.modules().size()) + " modules";
  out += ", format ";
  out += ck.format_name();
  out += '\n';
  w.reserve(out.size());
  w.text(out);
  w.flush();
  if (!w.ok() || std::fflush(stdout) != 0) {
    std::fprintf(stderr, "ptread: cannot write the output: %s\n", std::strerror(errno));
    return kExitFailed;
  }
  return kExitOk;
}

// ---- tree ----

// The items of an object that subclasses list or dict (pickled with APPENDS/SETITEMS).
// Value::list_items()/dict_items() are used when the library has them, else nothing shows.
template <class V>
auto list_items_of(const V& v, int) -> decltype(v.list_items()) { return v.list_items(); }
template <class V>
V list_items_of(const V&, long) { return V(); }
template <class V>
auto dict_items_of(const V& v, int) -> decltype(v.dict_items()) { return v.dict_items(); }
template <class V>
V dict_items_of(const V&, long) { return V(); }

class TreePrinter {
 public:
  std::string run(const ptread::Value& root) {
    const ptread::ValueKind k = root.kind();
    if (k == ptread::ValueKind::dict || is_sequence(k)) {
      // The root container's entries start at the left margin.
      if (root.size() == 0 || inline_sequence(root, nullptr)) {
        entry(0, "", root, "", 0);
      } else {
        on_path_.insert(root.id());
        shown_.emplace(root.id(), "<root>");
        children(root, 0, "", 0);
      }
    } else {
      entry(0, "", root, "", 0);
    }
    return std::move(out_);
  }

 private:
  static constexpr size_t kMaxDepth = 64;
  static constexpr size_t kMaxItems = 32;
  static constexpr size_t kInlineWidth = 100;
  static constexpr size_t kMaxScalarRepr = 200;

  static bool is_sequence(ptread::ValueKind k) {
    using K = ptread::ValueKind;
    return k == K::list || k == K::tuple || k == K::set || k == K::frozenset;
  }
  static bool is_scalar(ptread::ValueKind k) {
    using K = ptread::ValueKind;
    return k == K::none || k == K::boolean || k == K::integer || k == K::big_integer || k == K::floating ||
           k == K::string || k == K::bytes || k == K::global;
  }
  static bool is_container(ptread::ValueKind k) {
    return k == ptread::ValueKind::dict || k == ptread::ValueKind::object || is_sequence(k);
  }

  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  // repr() of a scalar, cut when very long (a pickled vocabulary, a long text).
  static std::string scalar_repr(const ptread::Value& v) {
    std::string s = v.repr();
    if (s.size() <= kMaxScalarRepr) return s;
    size_t cut = kMaxScalarRepr;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;
    const size_t full = s.size();
    s.resize(cut);
    s += "... (" + std::to_string(full) + " characters)";
    return s;
  }

  // A dict key as Python's str() prints it, on one line.
  static std::string key_text(const ptread::Value& k) {
    if (auto s = k.as_string()) return display(*s);
    return display(k.repr());
  }

  // A list/tuple/set of scalars on one line: "[0.9, 0.999]", "[1, 2, 3, ...] (500 items)".
  // Returns false (and writes nothing) when an item is not a scalar.
  static bool inline_sequence(const ptread::Value& v, std::string* out) {
    using K = ptread::ValueKind;
    const K k = v.kind();
    if (!is_sequence(k)) return false;
    const size_t n = v.size();
    for (size_t i = 0; i < n; ++i) {  // all of them: a tensor past the shown head must not hide
      if (!is_scalar(v[i].kind())) return false;
    }
    if (out == nullptr) return true;
    if (n == 0) {
      *out = k == K::list ? "[]" : k == K::tuple ? "()" : k == K::set ? "set()" : "frozenset()";
      return true;
    }
    std::string s = k == K::list ? "[" : k == K::tuple ? "(" : k == K::set ? "{" : "frozenset({";
    size_t shown = 0;
    for (; shown < n; ++shown) {
      if (shown > 0 && s.size() > kInlineWidth) break;
      if (shown) s += ", ";
      s += scalar_repr(v[shown]);
    }
    if (shown < n) s += ", ...";
    if (k == K::tuple && n == 1) s += ",";
    s += k == K::list ? "]" : k == K::tuple ? ")" : k == K::set ? "}" : "})";
    if (shown < n) s += " (" + std::to_string(n) + " items)";
    *out = std::move(s);
    return true;
  }

  static std::string count(size_t n) { return std::to_string(n) + (n == 1 ? " item" : " items"); }

  // The state of an object as a dict (the dict half of a (dict, slots) state), or missing.
  static ptread::Value state_dict_of(const ptread::Value& obj, ptread::Value* slots) {
    ptread::Value st = obj.state();
    if (st.is_tuple() && st.size() == 2 && (st[0].is_dict() || st[0].is_none()) && st[1].is_dict()) {
      *slots = st[1];
      return st[0];
    }
    return st;
  }

  static bool is_module_state(const ptread::Value& d) {
    return d.is_dict() && (d["_parameters"].is_dict() || d["_modules"].is_dict());
  }

  void indent(size_t n) { out_.append(n, ' '); }

  // One "label: value" line, and the value's children below it when it is a container.
  void entry(size_t ind, const std::string& label, const ptread::Value& v, const std::string& path, size_t depth) {
    using K = ptread::ValueKind;
    indent(ind);
    out_ += label;
    const K k = v.kind();
    if (k == K::tensor) {
      out_ += tensor_label(*v.as_tensor().value());
      out_ += '\n';
      return;
    }
    if (k == K::unsupported) {
      out_ += "<unsupported: " + display(v.unsupported_reason()) + ">\n";
      return;
    }
    if (k == K::storage) {  // a storage saved on its own: its dtype, size and device
      const auto st = v.as_storage();
      out_ += st ? "storage " + display(tensor_label(*st)) + "\n" : "<storage: " + display(st.error().message()) + ">\n";
      return;
    }
    if (k == K::quantized) {
      const auto q = v.as_quantized();
      std::string shape;
      if (q) append_dims(shape, q->shape);
      out_ += q ? std::string(ptread::dtype_name(q->dtype)) + shape + " quantized " + ptread::qscheme_name(q->qscheme) + "\n"
                : std::string("<quantized>\n");
      return;
    }
    if (k == K::sparse) {
      const auto sp = v.as_sparse();
      std::string shape;
      if (sp) append_dims(shape, sp->shape);
      out_ += sp ? std::string(ptread::dtype_name(sp->dtype())) + shape + " sparse " + ptread::sparse_layout_name(sp->layout) + "\n"
                 : std::string("<sparse>\n");
      return;
    }
    if (!is_container(k)) {
      out_ += display(is_scalar(k) ? scalar_repr(v) : v.repr());
      out_ += '\n';
      return;
    }
    std::string inline_text;
    if (k == K::dict && v.size() == 0) {
      out_ += "{}\n";
      return;
    }
    if (inline_sequence(v, &inline_text)) {
      out_ += display(inline_text);
      out_ += '\n';
      return;
    }
    std::string header;
    if (k == K::object) {
      header = "<" + object_label(v) + ">";
      if (!has_members(v)) {  // everything is in the label: torch.device('cuda', 0), enums
        out_ += header;
        out_ += '\n';
        return;
      }
    } else {
      header = std::string(ptread::value_kind_name(k)) + " (" + count(v.size()) + ")";
    }
    out_ += header;
    if (on_path_.count(v.id())) {
      out_ += " <cycle>\n";
      return;
    }
    auto seen = shown_.find(v.id());
    if (seen != shown_.end()) {
      out_ += " (shown above at " + display(seen->second) + ")\n";
      return;
    }
    if (depth >= kMaxDepth) {
      out_ += " <nested too deep>\n";
      return;
    }
    out_ += '\n';
    shown_.emplace(v.id(), path);
    on_path_.insert(v.id());
    children(v, ind + 2, path, depth + 1);
    on_path_.erase(v.id());
  }

  // "module.Class", with short scalar constructor arguments: "torch.device('cuda', 0)".
  static std::string object_label(const ptread::Value& obj) {
    std::string name = obj.class_name();
    if (name.empty()) name = "object";
    const ptread::Value args = obj.args();
    if (obj.state().is_missing() && args.is_tuple() && args.size() > 0) {
      std::string text;
      if (inline_sequence(args, &text) && text.size() <= kInlineWidth) {
        if (args.size() == 1 && text.size() >= 2 && text[text.size() - 2] == ',') text.erase(text.size() - 2, 1);
        return name + text;
      }
    }
    return name;
  }

  // Whether an object has anything to show below its label.
  static bool has_members(const ptread::Value& obj) {
    ptread::Value slots;
    const ptread::Value st = state_dict_of(obj, &slots);
    if (st.is_dict() ? st.size() > 0 : !st.is_missing() && !st.is_none()) return true;
    if (slots.size() > 0 || list_items_of(obj, 0).size() > 0 || dict_items_of(obj, 0).size() > 0) return true;
    return obj.args().size() > 0 && object_label(obj) == obj.class_name();
  }

  // TorchScript modules keep every attribute in their state; these two say nothing.
  static bool torchscript_noise(const ptread::Value& obj, std::string_view key, const ptread::Value& val) {
    if (obj.class_name().compare(0, 10, "__torch__.") != 0) return false;
    return key == "training" || (key == "_is_full_backward_hook" && val.is_none());
  }

  void children(const ptread::Value& v, size_t ind, const std::string& path, size_t depth) {
    using K = ptread::ValueKind;
    const K k = v.kind();
    if (k == K::dict) {
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string key = key_text(v.key(i));
        entry(ind, key + ": ", v.value(i), join(path, key), depth);
      }
      return;
    }
    if (is_sequence(k)) {
      const size_t n = v.size();
      for (size_t i = 0; i < n && i < kMaxItems; ++i) {
        entry(ind, "[" + std::to_string(i) + "]: ", v[i], join(path, std::to_string(i)), depth);
      }
      if (n > kMaxItems) {
        indent(ind);
        out_ += "... (" + std::to_string(n - kMaxItems) + " more)\n";
      }
      return;
    }
    // An object.
    ptread::Value slots;
    const ptread::Value st = state_dict_of(v, &slots);
    if (is_module_state(st)) {
      module_children(st, ind, path, depth);
    } else if (st.is_dict()) {
      for (size_t i = 0; i < st.size(); ++i) {
        const ptread::Value key = st.key(i), val = st.value(i);
        auto name = key.as_string();
        if (name && torchscript_noise(v, *name, val)) continue;
        const std::string text = key_text(key);
        entry(ind, text + ": ", val, join(path, text), depth);
      }
    } else if (!st.is_missing() && !st.is_none()) {
      entry(ind, "state: ", st, path, depth);
    } else if (v.args().size() > 0 && object_label(v) == v.class_name()) {
      entry(ind, "args: ", v.args(), path, depth);
    }
    if (slots.is_dict()) children(slots, ind, path, depth);
    const ptread::Value list_items = list_items_of(v, 0), dict_items = dict_items_of(v, 0);
    if (list_items.size() > 0) children(list_items, ind, path, depth);
    if (dict_items.size() > 0) children(dict_items, ind, path, depth);
  }

  // An nn.Module: parameters, buffers (as state_dict() names them), its public attributes
  // (hyperparameters such as in_features), then submodules; torch's hook tables and other
  // private fields are left out.
  void module_children(const ptread::Value& st, size_t ind, const std::string& path, size_t depth) {
    const ptread::Value non_persistent = st["_non_persistent_buffers_set"];
    auto is_non_persistent = [&](const ptread::Value& key) {
      auto name = key.as_string();
      if (!name) return false;
      for (size_t i = 0; i < non_persistent.size(); ++i) {
        auto e = non_persistent[i].as_string();
        if (e && *e == *name) return true;
      }
      return false;
    };
    auto members = [&](const char* field, bool buffers) {
      const ptread::Value d = st[field];
      for (size_t i = 0; i < d.size(); ++i) {
        const ptread::Value val = d.value(i);
        if (val.is_none()) continue;
        const std::string key = key_text(d.key(i));
        const bool hidden = buffers && is_non_persistent(d.key(i));
        entry(ind, key + (hidden ? " (non-persistent): " : ": "), val, join(path, key), depth);
      }
    };
    members("_parameters", false);
    members("_buffers", true);
    for (size_t i = 0; i < st.size(); ++i) {
      const ptread::Value key = st.key(i);
      auto name = key.as_string();
      if (name && (name->empty() || (*name)[0] == '_' || *name == "training")) continue;
      const std::string text = key_text(key);
      entry(ind, text + ": ", st.value(i), join(path, text), depth);
    }
    members("_modules", false);
  }

  std::string out_;
  std::unordered_set<uint32_t> on_path_;
  std::unordered_map<uint32_t, std::string> shown_;
};

// ---- export, convert ----

// Names on stderr what is not a plain tensor and so is not written (the entries `keep`
// selects): quantized and sparse tensors, and what ptread cannot read.
template <class Keep>
void report_not_written(const ptread::Checkpoint& ck, const Keep& keep) {
  for (const auto& q : ck.quantized()) {
    if (!keep(q.name)) continue;
    std::fprintf(stderr, "ptread: skipped %s: quantized tensor (%s, %s), not a plain tensor\n", display(q.name).c_str(),
                 ptread::dtype_name(q.tensor.dtype), ptread::qscheme_name(q.tensor.qscheme));
  }
  for (const auto& sp : ck.sparse()) {
    if (!keep(sp.name)) continue;
    std::fprintf(stderr, "ptread: skipped %s: sparse tensor (%s), not a plain tensor\n", display(sp.name).c_str(),
                 ptread::sparse_layout_name(sp.tensor.layout));
  }
  for (const auto& u : ck.unsupported()) {
    if (keep(u.name)) std::fprintf(stderr, "ptread: skipped %s: %s\n", display(u.name).c_str(), display(u.reason).c_str());
  }
}

int write_failed(const ptread::Error& e) {
  std::fprintf(stderr, "ptread: %s\n", e.what());
  return kExitFailed;
}

int export_safetensors(const ptread::Checkpoint& ck, const std::string& out_path) {
  ptread_cli::ProgressLine progress;
  ptread::SaveSafetensorsOptions o;
  o.metadata = {{"format", "pt"}};
  o.skip_unsupported = true;
  o.progress = [&progress](uint64_t done, uint64_t total) { progress.update(done, total); };
  auto written = ptread::save_safetensors(out_path, ck.tensors(), o);
  progress.finish();
  if (!written) return write_failed(written.error());
  for (const auto& s : written->skipped) {
    std::fprintf(stderr, "ptread: skipped %s: %s\n", display(s.name).c_str(), s.reason.c_str());
  }
  report_not_written(ck, [](const std::string&) { return true; });
  return kExitOk;
}

int convert(const ptread::Checkpoint& ck, const Args& args) {
  auto keep = [&args](const std::string& name) {
    if (!args.prefix) return true;
    const std::string& p = *args.prefix;
    return name.compare(0, p.size(), p) == 0 && (name.size() == p.size() || name[p.size()] == '.');
  };
  std::vector<ptread::NamedTensor> selected;
  std::unordered_map<std::string, const std::string*, ptread::detail::KeyedHash> source_of;  // written name -> name in the file (names a file chose: keyed)
  for (const auto& nt : ck.tensors()) {
    if (!keep(nt.name)) continue;
    std::string name = nt.name;
    if (args.strip_prefix) {
      const std::string& p = *args.strip_prefix;
      if (name.size() > p.size() && name.compare(0, p.size(), p) == 0 && name[p.size()] == '.') name.erase(0, p.size() + 1);
    }
    const auto seen = source_of.emplace(name, &nt.name);
    if (!seen.second) {
      std::fprintf(stderr, "ptread: %s and %s would both be written as %s%s\n", display(*seen.first->second).c_str(),
                   display(nt.name).c_str(), display(name).c_str(),
                   args.strip_prefix ? " (after --strip-prefix); nothing written" : "; nothing written");
      return kExitFailed;
    }
    selected.push_back({std::move(name), nt.tensor});
  }
  if (args.prefix && selected.empty()) {
    std::fprintf(stderr, "ptread: no tensor is named %s or starts with '%s.'; nothing written\n",
                 display(*args.prefix).c_str(), display(*args.prefix).c_str());
    return kExitFailed;
  }
  report_not_written(ck, keep);
  ptread_cli::ProgressLine progress;
  ptread::SavePtOptions o;
  o.float_dtype = args.dtype;
  o.progress = [&progress](uint64_t done, uint64_t total) { progress.update(done, total); };
  auto written = ptread::save_pt(args.files[1], selected, o);
  progress.finish();
  return written ? kExitOk : write_failed(written.error());
}

// ---- audit ----

int audit(const ptread::Checkpoint& ck, bool json) {
  const ptread::AuditReport r = ptread::audit(ck);
  std::string out;
  if (json) {
    out += "{\n  \"format\": ";
    append_json_string(out, r.format);
    out += ",\n  \"globals\": [";
    for (size_t k = 0; k < r.globals.size(); ++k) {
      const auto& g = r.globals[k];
      out += k ? ",\n    {\"module\": " : "\n    {\"module\": ";
      append_json_string(out, g.module);
      out += ", \"name\": ";
      append_json_string(out, g.name);
      out += ", \"count\": " + std::to_string(g.count);
      out += g.allowed ? ", \"weights_only\": \"allowed\"}" : ", \"weights_only\": \"refused\"}";
    }
    out += r.globals.empty() ? "],\n" : "\n  ],\n";
    out += "  \"refused\": " + std::to_string(r.refused()) + "\n}\n";
  } else {
    size_t w = 6;
    std::vector<std::string> names;
    for (const auto& g : r.globals) {
      names.push_back(display(g.module + "." + g.name));
      w = std::max(w, columns(names.back()));
    }
    out += "GLOBAL";
    pad_to(out, 6, w + 2);
    out += "COUNT  torch.load(weights_only=True)\n";
    for (size_t k = 0; k < r.globals.size(); ++k) {
      out += names[k];
      pad_to(out, columns(names[k]), w + 2);
      const std::string c = std::to_string(r.globals[k].count);
      pad_to(out, c.size(), 5);
      out += c;
      out += r.globals[k].allowed ? "  allowed\n" : "  REFUSED\n";
    }
    out += std::to_string(r.globals.size()) + (r.globals.size() == 1 ? " global" : " globals") + ", format " + r.format;
    if (r.refused() == 0) {
      out += ": nothing torch.load(weights_only=True) would refuse\n";
    } else {
      out += ": " + std::to_string(r.refused()) +
             " refused by torch.load(weights_only=True); torch.load(weights_only=False) would import them and may call "
             "them (ptread never does)\n";
    }
  }
  const int written = finish_stdout(out);
  if (written != kExitOk) return written;
  return r.refused() ? kExitUnsafe : kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  const int parsed = parse_args(argc, argv, &args);
  if (parsed >= 0) return parsed;

  ptread::Options options;
  options.mode = args.mode;
  options.threads = 0;  // every hardware thread: the directory walked beside the pickle, read mode's copies shared
  auto ck = ptread::Checkpoint::open(args.files[0], options);
  if (!ck) {
    std::fprintf(stderr, "ptread: %s\n", ck.error().what());
    return kExitFailed;
  }
  if (args.command == "ls") {
    // The listing is written and flushed: exit without tearing down every tensor one by
    // one (the system frees the process at once; for 100,000 tensors that is most of the
    // time left).
    const int status = args.json ? finish_stdout(ls_json(*ck)) : ls_table(*ck);
    std::fflush(stderr);
    std::_Exit(status);
  }
  if (args.command == "tree") {
    return finish_stdout(std::string("# format: ") + ck->format_name() + "\n" + TreePrinter().run(ck->root()));
  }
  if (args.command == "audit") return audit(*ck, args.json);
  if (args.command == "convert") return convert(*ck, args);
  return export_safetensors(*ck, args.files[1]);
}
