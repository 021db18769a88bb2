// ptread (the tool) — `ptread ls` and `ptread ls --json`: the tensor table, written fast for 100,000 rows.
#pragma once

#include "output.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace ptread_cli {

inline std::string ls_json(const ptread::Checkpoint& ck) {
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
inline bool plain_ascii(std::string_view s) {
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

inline size_t decimal_len(uint64_t v) {
  size_t n = 1;
  for (; v >= 10000; v /= 10000) n += 4;  // (compares, not a division per digit, for the usual sizes)
  return n + (v >= 10) + (v >= 100) + (v >= 1000);
}
inline size_t decimal_len(int64_t v) {
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
inline int ls_table(const ptread::Checkpoint& ck) {
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

}  // namespace ptread_cli
