// One line in, one line out: each input line is a pickle in hex; each output line is
// "OK <hex of ptread's repr of the root>" or "ERR <code name> <message, ASCII>", read as
// the zip reader reads a torch.save archive's data.pkl (a read crossing a FRAME's end is
// refused). Used by differential.py.
#include <ptread/ptread.hpp>
#include <ptread/detail/python_repr.hpp>

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
    ptread::detail::Model model;
    ptread::Limits limits;
    ptread::detail::StorageLoader none = [](std::string_view, uint64_t, ptread::DType)
        -> ptread::Result<std::shared_ptr<const ptread::Storage>> {
      return ptread::make_error(ptread::ErrorCode::record_missing, "no storages here");
    };
    ptread::detail::TorchHooks hooks(model, none, limits);
    ptread::detail::PickleVM vm(model.graph, hooks, limits, "data.pkl");
    auto root = vm.run(data.data(), data.size());
    if (root.ok() && vm.frame_straddle() != nullptr) root = *vm.frame_straddle();
    if (root.ok()) {
      std::string out = "OK ";
      for (char ch : ptread::detail::python_str(model.graph, *root, true)) {
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
