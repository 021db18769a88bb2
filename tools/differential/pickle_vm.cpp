// One line in, one line out: each input line is a pickle in hex; each output line is
// "OK <hex of ptread's repr of the root, each set's items sorted (canon_repr)>" or "ERR <code name> <message, ASCII>", read as
// the zip reader reads a torch.save archive's data.pkl (as torch.load's unpickler reads it
// where a read crosses a FRAME's end). Used by differential.py.
#include <ptread/ptread.hpp>
#include <ptread/pickle/python_repr.hpp>

#include "../../tests/support/canon_repr.hpp"

#include <iostream>
#include <string>
#include <vector>

namespace {

int hex_value(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : 0; }

}  // namespace

int main() {
  std::string line;
  static const char* const kHex = "0123456789abcdef";
  while (std::getline(std::cin, line)) {
    std::vector<uint8_t> data;
    for (size_t k = 0; k + 1 < line.size(); k += 2) {
      data.push_back(static_cast<uint8_t>(hex_value(line[k]) * 16 + hex_value(line[k + 1])));
    }
    ptread::Limits limits;
    ptread::detail::StorageLoader none = [](std::string_view, uint64_t, ptread::DType)
        -> ptread::Result<std::shared_ptr<const ptread::Storage>> {
      return ptread::make_error(ptread::ErrorCode::record_missing, "no storages here");
    };
    auto model = std::make_unique<ptread::detail::Model>();
    auto run = [&](const uint8_t* p, size_t n, const ptread::detail::UnframedPickle* unframed, bool* otherwise) {
      ptread::detail::TorchHooks hooks(*model, none, limits);
      ptread::detail::PickleVM vm(model->graph, hooks, limits, "data.pkl");
      vm.set_unframed(unframed);
      auto r = vm.run(p, n);
      *otherwise = vm.torch_reads_otherwise();
      return r;
    };
    bool otherwise = false;
    auto root = run(data.data(), data.size(), nullptr, &otherwise);
    if (otherwise) {  // as read_zip_pickles reads it
      const auto unframed = ptread::detail::unframe_as_torch_load(data.data(), data.size());
      model = std::make_unique<ptread::detail::Model>();
      root = run(unframed.bytes.data(), unframed.bytes.size(), &unframed, &otherwise);
    }
    if (root.ok()) {
      std::string out = "OK ";
      for (char ch : ptread_test::canon_repr(model->graph, *root)) {
        const auto c = static_cast<unsigned char>(ch);
        out += kHex[c >> 4];
        out += kHex[c & 15];
      }
      std::cout << out << '\n';
    } else {
      std::string m = root.error().message().substr(0, 160);
      for (char& c : m) {
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
      }
      std::cout << "ERR " << ptread::error_code_name(root.error().code()) << ' ' << m << '\n';
    }
  }
  return 0;
}
