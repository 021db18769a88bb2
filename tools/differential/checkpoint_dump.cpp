// One path in, one block out: for each checkpoint path read from stdin, prints
//   OK <count>
//   T <name> <dtype> <shape, comma-separated> <bytes> <CRC-32 of the contiguous bytes, hex>
//   ... (one T line per tensor, in tensors() order)
// or
//   ERR <code name> <message, ASCII, one line>
// or OPAQUE when a tensor is over 1 GiB (an expanded view of a few bytes, in damaged
// files: not copied out here, and not by checkpoints.py's torch side either),
// opened in the mode given as the first argument (mmap, the default, or read).
// Used by checkpoints.py.
#include <ptread/ptread.hpp>
#include <ptread/detail/crc32.hpp>

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
    for (const auto& nt : ck->tensors()) opaque = opaque || nt.tensor.nbytes() > (uint64_t{1} << 30);
    if (opaque) {
      std::cout << "OPAQUE\n";
      std::cout.flush();
      continue;
    }
    for (const auto& nt : ck->tensors()) {
      const ptread::Tensor& t = nt.tensor;
      bytes.assign(static_cast<size_t>(t.nbytes()), 0);
      auto st = t.copy_to(bytes.data(), bytes.size());
      if (!st) {
        print_error(st.error());
        failed = true;
        break;
      }
      std::string shape;
      for (size_t d = 0; d < t.dim(); ++d) shape += (d ? "," : "") + std::to_string(t.shape()[d]);
      char crc[16];
      std::snprintf(crc, sizeof crc, "%08x",
                    static_cast<unsigned>(ptread::detail::Crc32::update(0, bytes.data(), bytes.size())));
      out += "T " + one_line(nt.name) + ' ' + ptread::dtype_name(t.dtype()) + " [" + shape + "] " +
             std::to_string(bytes.size()) + ' ' + crc + '\n';
      ++count;
    }
    if (!failed) std::cout << "OK " << count << '\n' << out;
    std::cout.flush();
  }
  return 0;
}
