// ptread (the tool) — `ptread ls` and `ptread ls --json`: the tensor table, written fast for 100,000 rows.
#pragma once

#include "filter.hpp"
#include "output.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace ptread_cli {

enum class SortBy { file, name, size };

// The tensors ls lists: those the filter keeps, in the order asked (size: largest first;
// ties, and the default, in file order). No filter and file order: all, with no order made.
struct Selection {
  bool all = true;
  std::vector<uint32_t> order;  // when !all: the tensors' numbers, row by row
  size_t size(const ptread::Checkpoint& ck) const { return all ? ck.tensor_count() : order.size(); }
  size_t operator[](size_t row) const { return all ? row : order[row]; }
  const uint32_t* data() const { return all ? nullptr : order.data(); }
};

inline Selection select_tensors(const ptread::Checkpoint& ck, const NameFilter& filter, SortBy by) {
  Selection sel;
  if (filter.empty() && by == SortBy::file) return sel;
  sel.all = false;
  const size_t n = ck.tensor_count();
  for (size_t k = 0; k < n; ++k) {
    if (filter.empty() || filter.keep(ck.tensor_info(k).name)) sel.order.push_back(static_cast<uint32_t>(k));
  }
  if (by == SortBy::name) {
    std::vector<std::string_view> names(n);  // (read once, not per comparison)
    for (uint32_t k : sel.order) names[k] = ck.tensor_info(k).name;
    std::stable_sort(sel.order.begin(), sel.order.end(), [&](uint32_t a, uint32_t b) { return names[a] < names[b]; });
  } else if (by == SortBy::size) {
    std::vector<uint64_t> bytes(n);
    for (uint32_t k : sel.order) bytes[k] = ck.tensor_info(k).nbytes;
    std::stable_sort(sel.order.begin(), sel.order.end(), [&](uint32_t a, uint32_t b) { return bytes[a] > bytes[b]; });
  }
  return sel;
}

inline std::string ls_json(const ptread::Checkpoint& ck, const NameFilter& filter = {}, SortBy by = SortBy::file) {
  std::string out;
  const Selection sel = select_tensors(ck, filter, by);
  const size_t n = sel.size(ck);  // metadata only: no Tensor is made
  out.reserve(128 + n * 128);
  out += "{\n  \"format\": ";
  append_json_string(out, ck.format_name());
  out += ",\n  \"tensors\": [";
  for (size_t k = 0; k < n; ++k) {
    const ptread::TensorInfo t = ck.tensor_info(sel[k]);
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
    if (!t.shard.empty()) {  // sharded sets: the file it was read from
      out += ", \"shard\": ";
      append_json_string(out, t.shard);
    }
    out += '}';
  }
  out += n == 0 ? "],\n" : "\n  ],\n";
  out += "  \"unsupported\": [";
  size_t shown = 0;
  for (const auto& u : ck.unsupported()) {
    if (!filter.keep(u.name)) continue;
    out += shown++ ? ",\n    {\"name\": " : "\n    {\"name\": ";
    append_json_string(out, u.name);
    out += ", \"reason\": ";
    append_json_string(out, u.reason);
    out += '}';
  }
  out += shown == 0 ? "],\n" : "\n  ],\n";
  out += "  \"quantized\": [";
  shown = 0;
  for (const auto& q : ck.quantized()) {
    if (!filter.keep(q.name)) continue;
    out += shown++ ? ",\n    {\"name\": " : "\n    {\"name\": ";
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
  out += shown == 0 ? "],\n" : "\n  ],\n";
  out += "  \"sparse\": [";
  shown = 0;
  for (const auto& sp : ck.sparse()) {
    if (!filter.keep(sp.name)) continue;
    out += shown++ ? ",\n    {\"name\": " : "\n    {\"name\": ";
    append_json_string(out, sp.name);
    out += ", \"layout\": \"";
    out += ptread::sparse_layout_name(sp.tensor.layout);
    out += "\", \"dtype\": \"";
    out += ptread::dtype_name(sp.tensor.dtype());
    out += "\", \"shape\": ";
    append_dims(out, sp.tensor.shape);
    out += '}';
  }
  out += shown == 0 ? "],\n" : "\n  ],\n";
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
  explicit TableWriter(std::FILE* f) : f_(f), buf_(new char[kChunk]), size_(kChunk), p_(buf_.get()) {}
  // Writes the whole buffer once, from the calling thread (the buffer's fresh pages
  // faulted in there; see ls_table), while no other thread uses the writer.
  void prefault() { std::memset(buf_.get(), 0, size_); }
  // Room for n more bytes (writes out what the buffer holds when needed).
  PTREAD_ALWAYS_INLINE void reserve(size_t n) {
    if (n + kSlack > static_cast<size_t>(buf_.get() + size_ - p_)) make_room(n + kSlack);
  }
  void flush() {
    const size_t n = static_cast<size_t>(p_ - buf_.get());
    if (n && std::fwrite(buf_.get(), 1, n, f_) != n) ok_ = false;
    p_ = buf_.get();
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
    if (n > size_) {
      buf_.reset(new char[n]);
      size_ = n;
      p_ = buf_.get();
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
  std::unique_ptr<char[]> buf_;  // size_ bytes, written before they are read
  size_t size_;
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

// The widths of the table's columns, and the bytes of its tensors.
struct LsWidths {
  size_t name = 4, dtype = 5, shape = 5, device = 6, bytes = 5;
  uint64_t total = 0;
  void take(const LsWidths& o) {
    name = std::max(name, o.name);
    dtype = std::max(dtype, o.dtype);
    shape = std::max(shape, o.shape);
    device = std::max(device, o.device);
    bytes = std::max(bytes, o.bytes);
    total += o.total;
  }
};

// The rows of tensors [begin, end) of the list: measured (first pass), then written
// (second pass) once the widths of the whole table are known. The parts of a long list are
// measured on threads of their own (ls_table), each keeping its own tails.
class LsPart {
 public:
  // Rows begin .. end - 1: of the tensors order[begin] ... (all tensors in file order
  // when order is null).
  LsPart(const ptread::Checkpoint& ck, size_t begin, size_t end, const uint32_t* order)
      : ck_(ck), begin_(begin), end_(end), order_(order), shards_(ck.format() == ptread::Format::sharded) {
    for (int d = 0; d < ptread::kDTypeCount; ++d) dtype_len_[d] = std::strlen(ptread::dtype_name(static_cast<ptread::DType>(d)));
  }
  // First pass: the widths of these rows; *rows (the whole list's) gets each row's tail.
  LsWidths measure(uint32_t* rows) {
    LsWidths w;
    for (size_t k = begin_; k < end_; ++k) {
      const ptread::TensorInfo t = ck_.tensor_info(tensor(k));
      const bool plain = plain_ascii(t.name);
      if (plain) {
        w.name = std::max(w.name, t.name.size());
      } else {
        w.name = std::max(w.name, columns(display(t.name)));
      }
      bool fresh = shards_;  // (a sharded set's rows end in their shard: no tail is shared)
      const uint32_t id = shards_ ? RowTails::kNone : tails_.find(t, &fresh);
      rows[k] = id | (plain ? kPlain : 0);
      if (fresh) {  // (a tail seen before has its widths counted)
        w.dtype = std::max(w.dtype, dtype_len_[static_cast<size_t>(t.dtype)]);
        w.shape = std::max(w.shape, id != RowTails::kNone ? tails_[id].shape_len : dims_len(t.shape));
        w.device = std::max(w.device, device_cols(t.device));
        w.bytes = std::max(w.bytes, decimal_len(t.nbytes));
      }
      w.total += t.nbytes;
    }
    return w;
  }
  // Second pass: the rows into out. Each takes at most its name and device and the
  // padded widths.
  void write(const uint32_t* rows, const LsWidths& ws, TableWriter& out) {
    const size_t widths = ws.name + ws.dtype + ws.shape + ws.device + ws.bytes + 9;
    std::string shown;
    for (size_t k = begin_; k < end_; ++k) {
      const bool plain = (rows[k] & kPlain) != 0;
      const uint32_t id = rows[k] & ~kPlain;
      RowTails::Tail* tail = id != RowTails::kNone ? &tails_[id] : nullptr;
      const bool copy = tail != nullptr && !tail->text.empty();  // the usual row: the name and a copy
      const std::string_view stored = ck_.tensor_info(tensor(k)).name;
      if (!plain) shown = display(stored);
      const std::string_view name = plain ? stored : std::string_view(shown);
      out.reserve(name.size() + ws.name + 2 + (copy ? tail->text.size() : 0));
      out.text(name);
      out.pad(plain ? name.size() : columns(name), ws.name + 2);
      if (copy) {
        out.text(tail->text);
        continue;
      }
      const ptread::TensorInfo t = ck_.tensor_info(tensor(k));
      out.reserve(t.device.size() + widths + (shards_ ? 2 + 4 * t.shard.size() : 0));
      char* const tail_at = out.pos();
      const size_t dl = dtype_len_[static_cast<size_t>(t.dtype)];
      out.text(ptread::dtype_name(t.dtype), dl);
      out.pad(dl, ws.dtype + 2);
      char* shape_at = out.pos();
      out.dims(t.shape);
      out.pad(static_cast<size_t>(out.pos() - shape_at), ws.shape + 2);
      out.text(t.device);
      out.pad(device_cols(t.device), ws.device + 2);
      out.pad(decimal_len(t.nbytes), ws.bytes);
      out.number(t.nbytes);
      if (shards_) {  // the last column: no padding after it
        out.text("  ", 2);
        if (plain_ascii(t.shard)) {
          out.text(t.shard);
        } else {
          out.text(display(t.shard));
        }
      }
      out.text("\n", 1);
      if (tail != nullptr) tail->text.assign(tail_at, out.pos());
    }
  }
  static constexpr uint32_t kPlain = 0x80000000u;  // in a row: its name is plain ASCII

 private:
  // The columns of a device: tensors share a few device texts (the same bytes, usually
  // one text), so the last one's width is kept.
  size_t device_cols(std::string_view d) {
    if (d.data() != last_device_.data() || d.size() != last_device_.size()) {
      last_device_ = d;
      last_device_cols_ = plain_ascii(d) ? d.size() : columns(d);
    }
    return last_device_cols_;
  }
  size_t tensor(size_t row) const { return order_ != nullptr ? order_[row] : row; }

  const ptread::Checkpoint& ck_;
  size_t begin_, end_;
  const uint32_t* order_;
  size_t dtype_len_[ptread::kDTypeCount];
  RowTails tails_;
  std::string_view last_device_;
  size_t last_device_cols_ = 0;
  bool shards_;  // a sharded set: each row ends in its shard (SHARD)
};

// Prints the table on stdout; returns the exit status. A list of 32,768 tensors or more is
// cut into parts (one per hardware thread, at most 4, at least 16,384 rows each) measured
// at once (its specs and shapes are read from memory that is not in cache: 100,000 rows,
// 3.5 ms on one thread, 1.5 ms on two), then written one after the other into one buffer
// that stays in cache. (Writing parts at once into buffers of their own cost more than it
// saved: 2 MB of fresh memory for 50,000 rows takes 2 ms to fault in on the VM measured.)
inline int ls_table(const ptread::Checkpoint& ck, const NameFilter& filter = {}, SortBy by = SortBy::file) {
  const Selection sel = select_tensors(ck, filter, by);
  const size_t n = sel.size(ck);  // metadata only: no Tensor is made
  constexpr size_t kPartRows = size_t{1} << 14;
  const size_t parts = std::max<size_t>(1, std::min<size_t>({ptread::detail::resolve_threads(0), 4, n / kPartRows}));
  std::vector<LsPart> part;
  part.reserve(parts);
  for (size_t p = 0; p < parts; ++p) part.emplace_back(ck, n * p / parts, n * (p + 1) / parts, sel.data());
  // The quantized, sparse and unsupported entries the filter keeps (their rows follow).
  std::vector<const ptread::NamedQuantized*> quantized;
  std::vector<const ptread::NamedSparse*> sparse;
  std::vector<const ptread::UnsupportedEntry*> unsupported;
  for (const auto& q : ck.quantized()) {
    if (filter.keep(q.name)) quantized.push_back(&q);
  }
  for (const auto& sp : ck.sparse()) {
    if (filter.keep(sp.name)) sparse.push_back(&sp);
  }
  for (const auto& u : ck.unsupported()) {
    if (filter.keep(u.name)) unsupported.push_back(&u);
  }
  // Fresh memory is faulted in by the thread that first writes it (15-24 us a page of 4 KiB
  // on the VM of bench/README.md, "Shadowed page tables"): each part's rows are written by
  // the thread measuring it (not cleared here first), and the output buffer by the last
  // part's thread, beside the measuring.
  std::unique_ptr<uint32_t[]> rows(new uint32_t[n]);  // per row: its tail's number (RowTails), and LsPart::kPlain
  std::vector<LsWidths> measured(parts);
  TableWriter w(stdout);
  ptread::detail::parallel_for(static_cast<unsigned>(parts), parts, [&](size_t p) {
    if (parts > 1 && p == parts - 1) w.prefault();
    measured[p] = part[p].measure(rows.get());
  });
  LsWidths ws;
  for (const LsWidths& m : measured) ws.take(m);
  for (const auto* qp : quantized) {  // their rows follow the tensors'
    const auto& q = *qp;
    ws.name = std::max(ws.name, columns(display(q.name)));
    ws.dtype = std::max(ws.dtype, std::strlen(ptread::dtype_name(q.tensor.dtype)));
    ws.shape = std::max(ws.shape, dims_len(q.tensor.shape));
    ws.device = std::max(ws.device, columns(q.tensor.int_repr.device()));
    ws.bytes = std::max(ws.bytes, decimal_len(q.tensor.int_repr.nbytes()));
  }
  for (const auto* spp : sparse) {
    const auto& sp = *spp;
    ws.name = std::max(ws.name, columns(display(sp.name)));
    ws.dtype = std::max(ws.dtype, std::strlen(ptread::dtype_name(sp.tensor.dtype())));
    ws.shape = std::max(ws.shape, dims_len(sp.tensor.shape));
  }
  std::string out;  // the header, then the lines after the rows
  auto row = [&](const std::string& name, size_t name_cols, const char* dtype, const std::string& shape,
                 const std::string& device, const std::string& bytes) {
    out += name;
    pad_to(out, name_cols, ws.name + 2);
    out += dtype;
    pad_to(out, std::strlen(dtype), ws.dtype + 2);
    out += shape;
    pad_to(out, shape.size(), ws.shape + 2);
    out += device;
    pad_to(out, columns(device), ws.device + 2);
    pad_to(out, bytes.size(), ws.bytes);
    out += bytes;
    out += '\n';
  };
  row("NAME", 4, "DTYPE", "SHAPE", "DEVICE", "BYTES");
  if (ck.format() == ptread::Format::sharded) out.insert(out.size() - 1, "  SHARD");
  w.reserve(out.size());
  w.text(out);
  out.clear();
  for (LsPart& p : part) p.write(rows.get(), ws, w);
  for (const auto* qp : quantized) {  // dtype, logical shape, device, bytes of int_repr()
    const auto& q = *qp;
    const std::string name = display(q.name);
    out += name;
    pad_to(out, columns(name), ws.name + 2);
    const char* dt = ptread::dtype_name(q.tensor.dtype);
    out += dt;
    pad_to(out, std::strlen(dt), ws.dtype + 2);
    std::string shape;
    append_dims(shape, q.tensor.shape);
    out += shape;
    pad_to(out, shape.size(), ws.shape + 2);
    out += q.tensor.int_repr.device();
    pad_to(out, columns(q.tensor.int_repr.device()), ws.device + 2);
    const std::string b = std::to_string(q.tensor.int_repr.nbytes());
    pad_to(out, b.size(), ws.bytes);
    out += b + "  quantized " + ptread::qscheme_name(q.tensor.qscheme) + "\n";
  }
  for (const auto* spp : sparse) {
    const auto& sp = *spp;
    const std::string name = display(sp.name);
    out += name;
    pad_to(out, columns(name), ws.name + 2);
    const char* dt = ptread::dtype_name(sp.tensor.dtype());
    out += dt;
    pad_to(out, std::strlen(dt), ws.dtype + 2);
    std::string shape;
    append_dims(shape, sp.tensor.shape);
    out += shape;
    pad_to(out, shape.size(), ws.shape + 2);
    out += sp.tensor.values.device();
    out += std::string("  sparse ") + ptread::sparse_layout_name(sp.tensor.layout) + ", " +
           std::to_string(sp.tensor.values.shape().size() ? sp.tensor.values.shape()[0] : 0) + " stored values\n";
  }
  for (const auto* u : unsupported) {
    const std::string name = display(u->name);
    out += name;
    pad_to(out, columns(name), ws.name + 2);
    out += "unsupported: " + display(u->reason) + "\n";
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
  append_u64(out, ws.total);
  out += ws.total == 1 ? " byte" : " bytes";
  if (ws.total >= 1024) out += " (" + human_bytes(ws.total) + ")";
  if (!quantized.empty()) out += ", " + std::to_string(quantized.size()) + " quantized";
  if (!sparse.empty()) out += ", " + std::to_string(sparse.size()) + " sparse";
  if (!unsupported.empty()) out += ", " + std::to_string(unsupported.size()) + " unsupported";
  if (!ck.modules().empty()) out += ", " + std::to_string(ck.modules().size()) + " modules";
  out += ", format ";
  out += ck.format_name();
  if (!ck.shards().empty()) out += " (" + std::to_string(ck.shards().size()) + (ck.shards().size() == 1 ? " shard)" : " shards)");
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
