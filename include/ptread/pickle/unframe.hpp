// ptread — a pickle's bytes in the order torch.load's unpickler reads them.
//
// torch.load unpickles a zip checkpoint's data.pkl from an io.BytesIO (torch 1.6 to 2.x,
// torch/serialization.py: `data_file = io.BytesIO(zip_file.get_record(pickle_file))`).
// CPython's C unpickler (Modules/_pickle.c, 3.8 and after) reading from a file keeps one
// buffer: the bytes of the last read from the file, or of the last FRAME. Each read of an
// opcode's operand is served from what is left of that buffer when it fits; when it does
// not, the rest of the buffer is dropped and the read goes to the file, which stands after
// the frame (_Unpickler_ReadImpl). So a read that begins in a frame and ends past its end
// takes its bytes from after the frame, not from where a flat reading would:
//
//   read(n)      operand fields, LONG1/LONG4 digits, BINSTRING and BINUNICODE text
//                (_Unpickler_Read): the buffer if n bytes are left in it, else n bytes of
//                the file; the buffer becomes those, used up.
//   readinto(n)  BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8 payloads
//                (_Unpickler_ReadInto): the buffer's rest, then the rest from the file: the
//                bytes a flat reading takes.
//   readline()   protocol 0's text (_Unpickler_Readline): up to a newline in the buffer,
//                else a line of the file.
//   FRAME n      read(8) for n, then read(n) and step back over it: a frame the buffer holds
//                changes nothing; else the n bytes after it are read and become the buffer.
//
// unframe_as_torch_load() replays those reads opcode by opcode (no value is made: the
// operand sizes are all it needs) and writes the bytes each read returned, in order,
// leaving out the FRAMEs that were read; the VM reads the result flat and makes what
// Python makes. Where a read of Python's fails (fewer bytes left than it asks, a last line
// without a newline), the bytes it would have had are written and the replay stops: the
// VM then fails on the same opcode. Each byte of the input is written at most once, so
// the result is never longer than the input, and the replay is linear in its length.
//
// Pickles whose reads all stay inside their frames, which are all that Python's pickler
// writes, give the input less its FRAMEs; the zip reader replays only a pickle whose flat
// reading crossed a frame's end, or failed after a FRAME (PickleVM::torch_reads_otherwise()).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace ptread {
namespace detail {

struct UnframedPickle {
  std::vector<uint8_t> bytes;
  // Where runs of bytes came from: {offset in bytes, offset in the input}, in order; a run
  // lasts to the next one's start.
  std::vector<std::pair<size_t, size_t>> runs;

  // The input offset of bytes[at] (at == bytes.size(): just after the last byte written).
  size_t input_offset(size_t at) const {
    auto it = std::upper_bound(runs.begin(), runs.end(), at,
                               [](size_t v, const std::pair<size_t, size_t>& r) { return v < r.first; });
    if (it == runs.begin()) return at;
    --it;
    return it->second + (at - it->first);
  }
};

class TorchLoadReads {
 public:
  // flat: as pickle.loads reads (every read where the last ended; a FRAME's bytes must
  // follow it, and are read as they lie).
  TorchLoadReads(const uint8_t* data, size_t n, bool flat = false) : data_(data), size_(n), flat_(flat) {}

  // (The output grows as it is written: data may run on past the pickle, as a legacy
  // file's storages follow its pickles.)
  UnframedPickle run() {
    for (;;) {
      size_t at = 0;
      if (!read(1, &at)) return finish();
      const uint8_t op = data_[at];
      const size_t op_out = out_.bytes.size();
      emit(at, 1);
      if (!operands(op, op_out)) return finish();
    }
  }

 private:
  enum class Reads : uint8_t { none, fixed, counted, counted_into, line, two_lines, frame, stop, unknown };
  struct OpReads {
    Reads kind;
    uint8_t n;  // fixed: its size; counted: the size of its length field
  };

  // What Python's unpickler reads after each opcode byte (Lib/pickletools.py).
  static OpReads op_reads(uint8_t op) {
    switch (op) {
      case '.': return {Reads::stop, 0};
      case '(': case '0': case '1': case '2': case 'N': case 'Q': case 'R': case 'a': case 'b': case 'd':
      case '}': case 'e': case 'l': case ']': case 'o': case 's': case 't': case ')': case 'u':
      case 0x81: case 0x85: case 0x86: case 0x87: case 0x88: case 0x89: case 0x8f: case 0x90:
      case 0x91: case 0x92: case 0x93: case 0x94: case 0x97: case 0x98:
        return {Reads::none, 0};
      case 'F': case 'I': case 'L': case 'P': case 'S': case 'V': case 'g': case 'p':
        return {Reads::line, 0};
      case 'c': case 'i': return {Reads::two_lines, 0};
      case 'K': case 'h': case 'q': case 0x80: case 0x82: return {Reads::fixed, 1};
      case 'M': case 0x83: return {Reads::fixed, 2};
      case 'J': case 'j': case 'r': case 0x84: return {Reads::fixed, 4};
      case 'G': return {Reads::fixed, 8};
      case 'U': case 0x8a: case 0x8c: return {Reads::counted, 1};  // SHORT_BINSTRING, LONG1, SHORT_BINUNICODE
      case 'T': case 'X': case 0x8b: return {Reads::counted, 4};   // BINSTRING, BINUNICODE, LONG4
      case 0x8d: return {Reads::counted, 8};                        // BINUNICODE8
      case 'C': return {Reads::counted_into, 1};                    // SHORT_BINBYTES
      case 'B': return {Reads::counted_into, 4};                    // BINBYTES
      case 0x8e: case 0x96: return {Reads::counted_into, 8};        // BINBYTES8, BYTEARRAY8
      case 0x95: return {Reads::frame, 0};
      default: return {Reads::unknown, 0};
    }
  }

  // Runs the reads of opcode op (its byte written at op_out); false: the replay ends.
  bool operands(uint8_t op, size_t op_out) {
    const OpReads r = op_reads(op);
    size_t at = 0;
    switch (r.kind) {
      case Reads::none: return true;
      case Reads::stop: case Reads::unknown: return false;
      case Reads::fixed: return read_out(r.n);
      case Reads::line: return line();
      case Reads::two_lines: return line() && line();
      case Reads::counted: case Reads::counted_into: {
        if (!read(r.n, &at)) return false;
        emit(at, r.n);
        // The length as unsigned: a negative one (LONG4, BINSTRING) is a read Python
        // refuses or cannot serve, and so is one this large.
        uint64_t len = 0;
        for (size_t k = r.n; k-- > 0;) len = (len << 8) | data_[at + k];
        return r.kind == Reads::counted ? read_out(len) : read_into(len);
      }
      case Reads::frame: {
        if (!read(8, &at)) return false;
        uint64_t len = 0;
        for (size_t k = 8; k-- > 0;) len = (len << 8) | data_[at + k];
        const size_t len_at = at;
        if (len <= buf_end_ - cur_) return unemit(op_out);  // the buffer holds it: nothing read
        if (flat_ && len <= size_ - pos_) return unemit(op_out);
        if (len > size_ - pos_) {  // Python's read of the frame fails: the VM sees the FRAME
          emit(len_at, 8);
          return false;
        }
        cur_ = pos_;
        pos_ += static_cast<size_t>(len);
        buf_end_ = pos_;
        return unemit(op_out);
      }
    }
    return false;
  }

  // Python's read(n): *at is where its bytes start in the input; false when it fails
  // (the bytes it would have had are written).
  bool read(uint64_t n, size_t* at) {
    if (n <= buf_end_ - cur_) {
      *at = cur_;
      cur_ += static_cast<size_t>(n);
      return true;
    }
    if (n > size_ - pos_) {
      emit(pos_, size_ - pos_);
      pos_ = size_;
      return false;
    }
    *at = pos_;
    pos_ += static_cast<size_t>(n);
    cur_ = buf_end_ = pos_;
    return true;
  }
  bool read_out(uint64_t n) {
    size_t at = 0;
    if (!read(n, &at)) return false;
    emit(at, static_cast<size_t>(n));
    return true;
  }
  // Python's readinto(n): the buffer's rest, then the file.
  bool read_into(uint64_t n) {
    const size_t from_buffer = static_cast<size_t>(std::min<uint64_t>(n, buf_end_ - cur_));
    emit(cur_, from_buffer);
    cur_ += from_buffer;
    n -= from_buffer;
    if (n == 0) return true;
    const size_t from_file = static_cast<size_t>(std::min<uint64_t>(n, size_ - pos_));
    emit(pos_, from_file);
    pos_ += from_file;
    return from_file == n;
  }
  // Python's readline(): in the buffer, else from the file (up to a newline or the end).
  bool line() {
    if (const void* nl = std::memchr(data_ + cur_, '\n', buf_end_ - cur_)) {
      const size_t end = static_cast<size_t>(static_cast<const uint8_t*>(nl) - data_) + 1;
      emit(cur_, end - cur_);
      cur_ = end;
      return true;
    }
    const void* nl = std::memchr(data_ + pos_, '\n', size_ - pos_);
    const size_t end = nl ? static_cast<size_t>(static_cast<const uint8_t*>(nl) - data_) + 1 : size_;
    emit(pos_, end - pos_);
    pos_ = cur_ = buf_end_ = end;
    return nl != nullptr;
  }

  void emit(size_t at, size_t n) {
    if (n == 0) return;
    const size_t out = out_.bytes.size();
    if (out_.runs.empty() || out_.runs.back().second + (out - out_.runs.back().first) != at) {
      out_.runs.emplace_back(out, at);
    }
    out_.bytes.insert(out_.bytes.end(), data_ + at, data_ + at + n);
  }
  // Takes back what was written from out on (a FRAME that was read: left out).
  bool unemit(size_t out) {
    out_.bytes.resize(out);
    while (!out_.runs.empty() && out_.runs.back().first >= out) out_.runs.pop_back();
    return true;
  }
  UnframedPickle finish() { return std::move(out_); }

  const uint8_t* data_;
  size_t size_;
  bool flat_;
  size_t pos_ = 0;      // the file's position: after its last read
  size_t cur_ = 0;      // the buffer's next byte ...
  size_t buf_end_ = 0;  // ... and its end (both input offsets; empty at first)
  UnframedPickle out_;
};

// data's bytes as torch.load's unpickler reads them, its FRAMEs left out (see above).
inline UnframedPickle unframe_as_torch_load(const uint8_t* data, size_t n) { return TorchLoadReads(data, n).run(); }

// Where the reading of unframe_as_torch_load() and a flat one (pickle.loads', or Python's
// unpickler on a file whose buffer holds the frames) part: the offset in data of the first
// byte one reads where the other reads another (the first byte the first skips), or where
// one stops and the other reads on; n when they read the same bytes.
inline size_t frame_readings_part(const uint8_t* data, size_t n) {
  const UnframedPickle a = TorchLoadReads(data, n).run();
  const UnframedPickle b = TorchLoadReads(data, n, true).run();
  const size_t common = std::min(a.bytes.size(), b.bytes.size());
  size_t k = 0;
  while (k < common && a.bytes[k] == b.bytes[k] && a.input_offset(k) == b.input_offset(k)) ++k;
  if (k == a.bytes.size() && k == b.bytes.size()) return n;
  if (k < a.bytes.size() && k < b.bytes.size()) return std::min(a.input_offset(k), b.input_offset(k));
  return k < a.bytes.size() ? a.input_offset(k) : b.input_offset(k);
}

}  // namespace detail
}  // namespace ptread
