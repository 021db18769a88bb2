#!/usr/bin/env bash
# Consumer tests: every way a project takes ptread in, built and run as its users would.
# Each builds tests/consumers/main.cpp (main.cu for nvcc), which opens examples/model.pt and
# checks it against torch's view of it (tests/consumers/check_model.hpp), then prints the
# configuration it was compiled with; the script checks that too.
#   add_subdirectory   a CMake project adding the source tree (no tests, tools, install rules)
#   find_package       ptread and its tool installed by `cmake --install` into a prefix; a
#                      separate project, also on a machine without OpenBLAS and CUDA
#   pkg-config         plain compiler with the installed ptread.pc's flags
#   -static            the same, linked -static: no dynamic loader, then run
#   Meson subproject   dependency('ptread', fallback: ...) from a parent Meson project
#   single header      single_include/ptread/ptread.hpp alone, -fno-exceptions, -Werror (and
#                      clang++ -fsyntax-only, no zlib)
#   nvcc               a .cu file with a kernel including the core (skipped without nvcc)
# Usage: bash tools/consumers.sh [BUILD_DIR]     (default: build-consumers; removed first)
# Everything builds at -O0, one translation unit each; of ptread's own programs only the tool
# (to check its install). The consumers run side by side, one per core (tools/jobs.sh), and
# their outputs are printed in order at the end.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/build-consumers}
src=$root/tests/consumers
model=$root/examples/model.pt
cxx=${CXX:-g++}
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER="$cxx")
rm -rf "$out"
mkdir -p "$out"

step() { printf '\n-- consumers: %s (at %ds)\n' "$*" "$SECONDS"; }
fail() {
  echo "consumers: FAILED: $*" >&2
  exit 1
}
# run_consumer NAME BINARY EXPECTED: runs it on examples/model.pt; its last line must say ok
# and contain EXPECTED (the configuration it must have been compiled with).
run_consumer() {
  local text
  text=$("$2" "$model") || fail "$1: the consumer exited with status $?"
  echo "$text"
  [[ $text == *"$3; ok" ]] || fail "$1: expected '$3; ok' in its output"
}

consumer_add_subdirectory() {
  step "add_subdirectory: a CMake project adds the source tree; ptread defines no tests, tools or install rules there"
  cmake -S "$src/add_subdirectory" -B "$out/add_subdirectory" "${cmake_args[@]}" -DPTREAD_DIR="$root" >/dev/null
  cmake --build "$out/add_subdirectory"
  cmake --install "$out/add_subdirectory" --prefix "$out/add_subdirectory-prefix" >/dev/null
  if [[ -e $out/add_subdirectory-prefix ]]; then
    fail "add_subdirectory: installing the parent project installed ptread's files: $(find "$out/add_subdirectory-prefix" -type f)"
  fi
  run_consumer add_subdirectory "$out/add_subdirectory/consumer" "PTREAD_EXCEPTIONS 1, PTREAD_WITH_ZLIB 0"
}

# find_package, then pkg-config and -static on the same install.
consumer_installed() {
  step "find_package: ptread (with zlib, and its tool) installed by cmake --install into a prefix, then a separate CMake project"
  prefix=$out/prefix
  ptread_log=$(cmake -S "$root" -B "$out/ptread" "${cmake_args[@]}" -DPTREAD_WITH_ZLIB=ON -DPTREAD_BUILD_TESTS=OFF \
    -DPTREAD_BUILD_TOOLS=ON -DPTREAD_BUILD_EXAMPLES=OFF -DPTREAD_BUILD_BENCH=OFF)
  cmake --build "$out/ptread"
  cmake --install "$out/ptread" --prefix "$prefix" >/dev/null
  "$prefix/bin/ptread" ls "$model" | tail -n 1 | grep '^27 tensors' || fail "find_package: the installed bin/ptread does not list 27 tensors"
  for f in include/ptread/ptread.hpp include/ptread/nn/openblas.hpp share/cmake/ptread/ptreadConfig.cmake \
    share/cmake/ptread/ptreadConfigVersion.cmake share/cmake/ptread/ptreadTargets.cmake share/pkgconfig/ptread.pc; do
    [[ -f $prefix/$f ]] || fail "find_package: the install has no $f"
  done
  grep -A1 'requested no architecture check' "$prefix/share/cmake/ptread/ptreadConfigVersion.cmake" | grep -q '"TRUE"' ||
    fail "find_package: ptreadConfigVersion.cmake is not ARCH_INDEPENDENT"
  # The installed package must define each backend exactly when the build tree did on this machine.
  expect() { [[ $ptread_log == *"ptread::$1 is defined"* ]] && echo ON || echo OFF; }
  cmake -S "$src/find_package" -B "$out/find_package" "${cmake_args[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
    -DEXPECT_ZLIB=ON -DEXPECT_OPENBLAS="$(expect openblas)" -DEXPECT_CUDA="$(expect cuda)" | grep 'consumer:'
  cmake --build "$out/find_package"
  run_consumer find_package "$out/find_package/consumer" "PTREAD_EXCEPTIONS 1, PTREAD_WITH_ZLIB 1"
  echo "find_package on a machine without OpenBLAS and CUDA (their searches disabled): configures, defines neither"
  cmake -S "$src/find_package" -B "$out/find_package-bare" "${cmake_args[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON -DCMAKE_DISABLE_FIND_PACKAGE_BLAS=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DEXPECT_ZLIB=ON -DEXPECT_OPENBLAS=OFF -DEXPECT_CUDA=OFF | grep 'consumer:'

  step "pkg-config: plain $cxx with the flags of the installed ptread.pc"
  export PKG_CONFIG_PATH=$prefix/share/pkgconfig
  cflags=$(pkg-config --cflags ptread)
  echo "pkg-config --cflags ptread: $cflags"
  echo "pkg-config --libs ptread: $(pkg-config --libs ptread)"
  echo "pkg-config --static --libs ptread: $(pkg-config --static --libs ptread)"
  mkdir -p "$out/pkg-config"
  # shellcheck disable=SC2086 # pkg-config's output is a list of flags
  "$cxx" -std=c++17 -O0 $cflags -c "$src/main.cpp" -o "$out/pkg-config/main.o"
  # shellcheck disable=SC2046
  "$cxx" "$out/pkg-config/main.o" $(pkg-config --libs ptread) -o "$out/pkg-config/consumer"
  run_consumer pkg-config "$out/pkg-config/consumer" "PTREAD_EXCEPTIONS 1, PTREAD_WITH_ZLIB 1"

  step "-static: the same object linked -static with pkg-config --static's flags; checked static, then run"
  # shellcheck disable=SC2046
  "$cxx" -static "$out/pkg-config/main.o" $(pkg-config --static --libs ptread) -o "$out/pkg-config/consumer-static"
  if readelf -l "$out/pkg-config/consumer-static" | grep -q INTERP; then
    fail "-static: the binary names a dynamic loader (INTERP)"
  fi
  readelf -d "$out/pkg-config/consumer-static" | grep -q 'no dynamic section' || fail "-static: the binary has a dynamic section"
  echo "readelf: no INTERP program header, no dynamic section"
  run_consumer -static "$out/pkg-config/consumer-static" "PTREAD_EXCEPTIONS 1, PTREAD_WITH_ZLIB 1"
  unset PKG_CONFIG_PATH
}

consumer_meson() {
  step "Meson subproject: dependency('ptread', fallback: ['ptread', 'ptread_dep']); ptread builds no tests or tool there"
  mkdir -p "$out/meson-src/subprojects"
  cp "$src/meson/meson.build" "$src/main.cpp" "$src/check_model.hpp" "$out/meson-src/"
  ln -s "$root" "$out/meson-src/subprojects/ptread"
  meson setup "$out/meson" "$out/meson-src" --buildtype=debug >/dev/null
  meson compile -C "$out/meson"
  built=$(find "$out/meson/subprojects" -type f -perm -u+x)
  [[ -z $built ]] || fail "Meson subproject: ptread built programs of its own: $built"
  run_consumer meson "$out/meson/consumer" "PTREAD_EXCEPTIONS 1, PTREAD_WITH_ZLIB 1"
}

consumer_single_header() {
  step "single header: single_include/ptread/ptread.hpp alone in an include directory; -fno-exceptions, warnings as errors"
  mkdir -p "$out/single/include/ptread"
  cp "$root/single_include/ptread/ptread.hpp" "$out/single/include/ptread/"
  "$cxx" -std=c++17 -O0 -fno-exceptions -Wall -Wextra -Wpedantic -Wconversion -Wshadow -Wundef -Werror \
    -I"$out/single/include" "$src/main.cpp" -pthread -o "$out/single/consumer"
  run_consumer single-header "$out/single/consumer" "PTREAD_EXCEPTIONS 0, PTREAD_WITH_ZLIB 0"
  if command -v clang++ >/dev/null; then  # the project's clang builds all have zlib: this one has none
    clang++ -std=c++17 -fno-exceptions -Wall -Wextra -Wpedantic -Wconversion -Wshadow -Wundef -Werror \
      -I"$out/single/include" -fsyntax-only "$src/main.cpp"
    echo "clang++ -fsyntax-only: no warning"
  fi
}

consumer_nvcc() {
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
  if [[ -n $nvcc ]]; then
    step "nvcc: a .cu file with a kernel, including <ptread/ptread.hpp>; built, linked and run (no CUDA call: no GPU needed)"
    mkdir -p "$out/nvcc"
    "$nvcc" -std=c++17 -I"$root/include" "$src/main.cu" -o "$out/nvcc/consumer"
    run_consumer nvcc "$out/nvcc/consumer" "PTREAD_EXCEPTIONS 1, PTREAD_WITH_ZLIB 0"
  else
    step "nvcc: NOT RUN: no nvcc on PATH or in /usr/local/cuda/bin (the CUDA Toolkit is not installed)"
  fi
}

# The consumers build independently (tools/jobs.sh: at most one per core, outputs printed in
# this order at the end); the longest, the install and its users, starts first.
# shellcheck source=tools/jobs.sh
source "$root/tools/jobs.sh"
jobs_init "$out/jobs"
jobs_start installed consumer_installed
jobs_start add_subdirectory consumer_add_subdirectory
jobs_start meson consumer_meson
jobs_start single_header consumer_single_header
jobs_start nvcc consumer_nvcc
jobs_finish || fail "see the FAILED consumers above"
step "all consumers passed"
