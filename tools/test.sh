#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this). On a fresh Debian machine:
#   bash tools/test.sh
# Stages: dependencies; single_include/ is what tools/amalgamate.py writes; the unit tests
# parse as one translation unit (the unity builds' batches cannot clash); a g++ build with
# -Werror and all tests (ctest: unit, fixtures, corpus, fresh torch-written fixtures, CLI,
# examples); clang++ -Werror builds of the tool, benchmarks and examples; clang ASan+UBSan;
# ThreadSanitizer on the tests of the code that runs on two threads; libFuzzer runs of the fuzz
# targets (tools/fuzz.sh); Meson, building a -fno-exceptions configuration without zlib whose
# tests include the single header; the consumer tests (tools/consumers.sh:
# add_subdirectory, find_package, pkg-config, -static, Meson subproject, single header, nvcc);
# Windows (tools/windows.sh: the unit suite, the tool and a consumer built with MinGW-w64 and
# run under Wine); the CUDA compile check when nvcc is present.
# The CUDA programs (tests/cuda, the cuda_split example, cuda_bench) are compiled by nvcc in
# the g++ stage when the toolkit is found (their GPU tests skip without a GPU); the other
# stages leave them out (-DPTREAD_CUDA=OFF) to spare nvcc time, and run the CUDA kernels
# emulated on the CPU like every stage.
# PTREAD_TEST_QUICK=1 runs only the first g++ stage.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${PTREAD_TEST_BUILD:-$root/build-test}
jobs=$(nproc 2>/dev/null || echo 2)
stage() { printf '\n==== %s (at %ds)\n' "$*" "$SECONDS"; }

stage "dependencies"
PTREAD_DEPS_WINDOWS=1 bash tools/deps.sh

stage "single header: single_include/ptread/ptread.hpp is what tools/amalgamate.py writes"
mkdir -p "$out"
python3 tools/amalgamate.py -o "$out/amalgamated.hpp"
if ! diff -u single_include/ptread/ptread.hpp "$out/amalgamated.hpp" >"$out/amalgamated.diff"; then
  head -n 40 "$out/amalgamated.diff"
  echo "single_include/ptread/ptread.hpp is out of date: run 'python3 tools/amalgamate.py' and commit it" >&2
  exit 1
fi

# The unity builds below (CMake: 8 sources a batch, Meson: 4) put test sources side by side;
# which ones depends on the file list, so two files' helpers of one name (in anonymous
# namespaces) may meet when a file is added. All the unit tests as one translation unit
# shows any such pair now, whatever the batches.
stage "unit tests: one translation unit (names no unity batching can pair)"
{ for f in tests/unit/*.cpp; do printf '#include "%s"\n' "$root/$f"; done; } >"$out/unit_all.cpp"
blas=()
if cflags=$(pkg-config --cflags openblas 2>/dev/null); then blas=($cflags -DPTREAD_TEST_OPENBLAS=1); fi
g++ -std=c++17 -fsyntax-only -Wall -Wextra -Wpedantic -Wconversion -Wshadow -Wundef -Werror -Iinclude -Itests \
  -DPTREAD_WITH_ZLIB=1 "${blas[@]}" '-DPTREAD_TEST_FIXTURES="."' '-DPTREAD_TEST_CORPUS="."' "$out/unit_all.cpp"

cmake_stage() {  # name, then extra cmake arguments
  local name=$1; shift
  stage "$name"
  cmake -S . -B "$out/$name" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
  cmake --build "$out/$name" -j "$jobs"
  ctest --test-dir "$out/$name" --output-on-failure -j "$jobs"
}

# The test builds are unity builds (a few test sources per compiler run): parsing the headers
# a few times instead of once per source compiles the suite in about a quarter of the time.
# Each source is still compiled alone by the clang stage's tool,
# benchmarks and examples; CMake 3.25 leaves CUDA sources out of unity batches.
unity=(-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8)
# nvcc's host compiler does not optimize here (no -O3 in CMAKE_CUDA_FLAGS_RELEASE): with no GPU
# the CUDA programs are only compiled, and optimizing the host half of each (the whole library
# again) was most of their ~75 s apiece. The device code is optimized as always (ptxas -O3).
cmake_stage gcc -DCMAKE_CXX_COMPILER=g++ "${unity[@]}" -DCMAKE_CUDA_FLAGS_RELEASE=-DNDEBUG
[[ ${PTREAD_TEST_QUICK:-0} == 1 ]] && exit 0
# clang: the tests are built and run by clang in the sanitize stage below; here the
# tool, benchmarks and examples, warning-free (-Werror). Unoptimized: clang's warnings come
# from its front end, the same at any -O, and nothing built here runs. Without OpenBLAS
# (the g++ stage has it): what a user without libopenblas-dev builds.
stage "clang (tool, benchmarks, examples; no OpenBLAS)"
cmake -S . -B "$out/clang" -G Ninja -DCMAKE_BUILD_TYPE= -DCMAKE_CXX_COMPILER=clang++ -DPTREAD_BUILD_TESTS=OFF \
  -DPTREAD_CUDA=OFF -DPTREAD_OPENBLAS=OFF >/dev/null
cmake --build "$out/clang" -j "$jobs"
# The next stages build without optimization: they check other configurations.
cmake_stage sanitize -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug "${unity[@]}" -DPTREAD_SANITIZE=ON \
  -DPTREAD_BUILD_BENCH=OFF -DPTREAD_BUILD_EXAMPLES=OFF

# ThreadSanitizer on the tests of what runs on two threads: the directory walked beside the
# pickle (the storages bound by whichever thread ends last, the pickle's VM destroyed by the
# other), the worker pool, the chunk reserve another thread faults in.
stage "thread sanitizer (overlap, worker pool and arena tests)"
mkdir -p "$out/tsan"
tsan=(g++ -std=c++17 -O1 -g -fsanitize=thread -Iinclude -Itests -DPTREAD_WITH_ZLIB=1
  "-DPTREAD_TEST_FIXTURES=\"$root/tests/fixtures\"" "-DPTREAD_TEST_CORPUS=\"$root/../shared/corpus\"")
pids=()
for f in main unit/overlap unit/parallel unit/arena; do
  "${tsan[@]}" -c "tests/$f.cpp" -o "$out/tsan/${f#unit/}.o" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
g++ -fsanitize=thread "$out"/tsan/{main,overlap,parallel,arena}.o -o "$out/tsan/tests" -pthread -lz
TSAN_OPTIONS=halt_on_error=1 "$out/tsan/tests" "[overlap],[parallel],[arena]"

stage "fuzz (libFuzzer, ${PTREAD_FUZZ_SECONDS:-30}s per target)"
bash tools/fuzz.sh "${PTREAD_FUZZ_SECONDS:-30}"

# Meson builds the configuration no other stage builds: -fno-exceptions, no zlib, the tests
# including single_include/ptread/ptread.hpp instead of include/ (the OpenBLAS tests are left
# out there: the single header is the core only). One stage for both saves a build and a run
# of the whole suite. The benchmarks and examples are built by the g++ and clang stages.
stage "meson: -fno-exceptions, no zlib, the single header"
rm -rf "$out/meson"
meson setup "$out/meson" --buildtype=plain --unity=on --unity-size=8 -Dbench=false -Dexamples=false \
  -Dno_exceptions=true -Dzlib=disabled -Dtest_single_header=true -Dcuda=disabled >/dev/null
meson test -C "$out/meson" --print-errorlogs

stage "consumers (tools/consumers.sh)"
bash tools/consumers.sh "$out/consumers"

stage "windows (MinGW-w64 under Wine: tools/windows.sh)"
bash tools/windows.sh "$out/windows" "$out/gcc/ptread"

nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
if [[ -n $nvcc ]]; then
  stage "nvcc compiles the core headers"
  mkdir -p "$out/nvcc"
  "$nvcc" -std=c++17 -Iinclude -c tests/cuda/core_in_cu.cu -o "$out/nvcc/core_in_cu.o"
  echo "nvcc: ok"
else
  stage "nvcc not found: CUDA compile check not run"
fi

stage "all stages passed"
