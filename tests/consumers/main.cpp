// The consumer program of tools/consumers.sh: built through each way in (add_subdirectory,
// find_package, pkg-config, Meson subproject, the single header, -static; main.cu for nvcc).
#include "check_model.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s examples/model.pt\n", argv[0]);
    return 2;
  }
  return check_model(argv[1]);
}
