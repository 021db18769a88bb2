// One path in, one block out: for each checkpoint path read from stdin, prints
//   OK <count>
//   T <name> <dtype> <shape, comma-separated> <bytes> <CRC-32 of the contiguous bytes, hex>
//   ... (one T line per tensor, in tensors() order)
//   Q <name> <dtype> <shape> <qscheme> int_repr <part> (axis <n> scales <part> zero_points <part>
//     | scale <the double's bytes, hex> zero_point <n>)    (one per quantized() entry)
//   S <name> <layout> <shape> <part> <part> [<part>]   (sparse(): indices or compressed and
//     plain indices, then values)
// where a <part> is <dtype> <shape> <bytes> <CRC-32 of the contiguous bytes, hex>
// or
//   ERR <code name> <message, ASCII, one line>
// or OPAQUE when a tensor is over 1 GiB (an expanded view of a few bytes, in damaged
// files: not copied out here, and not by checkpoints.py's torch side either),
// opened in the mode given as the first argument (mmap, the default, or read).
// Used by checkpoints.py.
#include <ptread/ptread.hpp>
#include <ptread/writers/crc32.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace {

std::string one_line(std::string m) {
  if (m.size() > 200) m.resize(200);
  for (char& c : m) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  return m;
}

void print_error(const ptread::Error& e) {
  std::cout << "ERR " << ptread::error_code_name(e.code()) << ' ' << one_line(e.message()) << '\n';
}

template <class Dims>
std::string shape_text(const Dims& dims) {
  std::string s = "[";
  for (size_t d = 0; d < dims.size(); ++d) s += (d ? "," : "") + std::to_string(dims[d]);
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  ptread::Options options;
  if (argc > 1 && std::strcmp(argv[1], "read") == 0) options.mode = ptread::LoadMode::read;
  std::string path;
  std::vector<unsigned char> bytes;
  while (std::getline(std::cin, path)) {
    auto ck = ptread::Checkpoint::open(path, options);
    if (!ck.ok()) {
      print_error(ck.error());
      std::cout.flush();
      continue;
    }
    std::string out;
    bool failed = false;
    size_t count = 0;
    bool opaque = false;
    const uint64_t kOpaque = uint64_t{1} << 30;
    for (const auto& nt : ck->tensors()) opaque = opaque || nt.tensor.nbytes() > kOpaque;
    for (const auto& q : ck->quantized()) {
      opaque = opaque || q.tensor.int_repr.nbytes() > kOpaque || q.tensor.scales.nbytes() > kOpaque ||
               q.tensor.zero_points.nbytes() > kOpaque;
    }
    for (const auto& sp : ck->sparse()) {
      opaque = opaque || sp.tensor.indices.nbytes() > kOpaque || sp.tensor.compressed_indices.nbytes() > kOpaque ||
               sp.tensor.plain_indices.nbytes() > kOpaque || sp.tensor.values.nbytes() > kOpaque;
    }
    if (opaque) {
      std::cout << "OPAQUE\n";
      std::cout.flush();
      continue;
    }
    // dtype, shape, byte count and CRC-32 of a tensor's contiguous bytes.
    auto part = [&](const ptread::Tensor& t, std::string* line) {
      bytes.assign(static_cast<size_t>(t.nbytes()), 0);
      auto st = t.copy_to(bytes.data(), bytes.size());
      if (!st) {
        print_error(st.error());
        return false;
      }
      char crc[16];
      std::snprintf(crc, sizeof crc, "%08x",
                    static_cast<unsigned>(ptread::detail::Crc32::update(0, bytes.data(), bytes.size())));
      *line += std::string(ptread::dtype_name(t.dtype())) + ' ' + shape_text(t.shape()) + ' ' +
               std::to_string(bytes.size()) + ' ' + crc;
      return true;
    };
    for (const auto& nt : ck->tensors()) {
      std::string line = "T " + one_line(nt.name) + ' ';
      failed = !part(nt.tensor, &line);
      if (failed) break;
      out += line + '\n';
      ++count;
    }
    // Quantized, then sparse tensors (checkpoints.py prints torch's in this form).
    for (size_t k = 0; !failed && k < ck->quantized().size(); ++k) {
      const auto& q = ck->quantized()[k];
      std::string line = "Q " + one_line(q.name) + ' ' + ptread::dtype_name(q.tensor.dtype) + ' ' +
                         shape_text(q.tensor.shape) + ' ' + ptread::qscheme_name(q.tensor.qscheme) + " int_repr ";
      failed = !part(q.tensor.int_repr, &line);
      if (!failed && q.tensor.per_channel()) {
        line += " axis " + std::to_string(q.tensor.axis) + " scales ";
        failed = !part(q.tensor.scales, &line);
        line += " zero_points ";
        failed = failed || !part(q.tensor.zero_points, &line);
      } else if (!failed) {
        uint64_t bits = 0;
        std::memcpy(&bits, &q.tensor.scale, sizeof bits);
        char hex[20];
        // (Python's struct.pack('<d').hex(): the little-endian bytes)
        for (int b = 0; b < 8; ++b) std::snprintf(hex + 2 * b, 3, "%02x", static_cast<unsigned>((bits >> (8 * b)) & 0xff));
        line += " scale " + std::string(hex) + " zero_point " + std::to_string(q.tensor.zero_point);
      }
      out += line + '\n';
      ++count;
    }
    for (size_t k = 0; !failed && k < ck->sparse().size(); ++k) {
      const auto& sp = ck->sparse()[k];
      std::string line = "S " + one_line(sp.name) + ' ' + ptread::sparse_layout_name(sp.tensor.layout) + ' ' +
                         shape_text(sp.tensor.shape);
      const bool coo = sp.tensor.layout == ptread::SparseLayout::coo;
      for (const ptread::Tensor* t : {coo ? &sp.tensor.indices : &sp.tensor.compressed_indices,
                                      coo ? nullptr : &sp.tensor.plain_indices, &sp.tensor.values}) {
        if (t == nullptr || failed) continue;
        line += ' ';
        failed = !part(*t, &line);
      }
      out += line + '\n';
      ++count;
    }
    if (!failed) std::cout << "OK " << count << '\n' << out;
    std::cout.flush();
  }
  return 0;
}
