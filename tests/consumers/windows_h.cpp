// ptread beside <windows.h>, included before it or after it (tools/windows.sh builds both and
// runs them on examples/model.pt): ptread declares the Windows calls it makes as the SDK
// declares them, so the two sets of declarations agree in either order.
#ifndef NOMINMAX
#define NOMINMAX  // (<windows.h>'s min and max macros would break std::min in any C++ header)
#endif
#if PTREAD_WINDOWS_H_FIRST
#include <windows.h>

#include <ptread/ptread.hpp>
#else
#include <ptread/ptread.hpp>

#include <windows.h>
#endif

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  // The SDK's CreateFileW, the one ptread calls too
  HANDLE h = CreateFileW(L"NUL", GENERIC_READ, 0, nullptr, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr);
  if (h == INVALID_HANDLE_VALUE) return 3;
  CloseHandle(h);
  auto ck = ptread::Checkpoint::open(argv[1]);
  if (!ck) {
    std::fprintf(stderr, "%s\n", ck.error().what());
    return 1;
  }
  std::printf("windows_h: %zu tensors\n", ck->tensors().size());
  return 0;
}
