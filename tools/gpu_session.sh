#!/usr/bin/env bash
# Everything of issue 5 that needs a GPU, in one run on a machine with a CUDA device and torch
# 2.x (the device tool's lease is short: one prepared run, each step bounded in time):
#   bash tools/gpu_session.sh OUT_DIR [BUILD_DIR]
# BUILD_DIR: a CMake build with CUDA (tests/cuda/ptread_cuda_tests, bench/cuda_bench,
# examples/cuda_split; built on any machine with nvcc, e.g. -DCMAKE_CUDA_ARCHITECTURES=90).
# Programs missing there, or that do not start here, are built here with nvcc (Catch2 v2's
# catch2/catch.hpp from PTREAD_CATCH_INCLUDE, default /usr/include).
# Writes into OUT_DIR, step by step (a step that fails or runs out of time is logged and the
# next one runs):
#   machine.txt       GPU, CPU, torch, nvcc
#   build.txt         the programs built here, if any
#   fixtures.txt      tests/fixtures/gen_cuda.py (torch 2.x, real CUDA tensors) and --check;
#   cuda_fixtures.tar the files it wrote (tests/fixtures/cuda), to commit
#   torch2.txt        tests/fixtures/gen_torch2.py (torch 2.x's own forms) and --check, then
#                     tests/writers/check_writers_torch2.py: torch 2.x reads back what
#                     `ptread convert` writes from them and from tests/fixtures/cuda
#   torch2_fixtures.tar the files gen_torch2.py wrote (compare with tests/fixtures/torch2)
#   cuda_tests.txt    ptread_cuda_tests (the gpu-labelled tests, these fixtures included),
#                     then examples/cuda_split on examples/nn_model.pt
#   bench.txt         bench/run_cuda.sh (GIB GiB upload, PTREAD_GPU_BENCH_GIB, default 4)
#   torch2_adversarial.txt  tests/data/adversarial/check_torch.py under torch 2.x
#   memcheck.txt      compute-sanitizer memcheck over the layer tests, in the time left
# PTREAD_GPU_DEADLINE: seconds for the whole run (default 540).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:?usage: gpu_session.sh OUT_DIR [BUILD_DIR]}
build=${2:-$root/build}
py=${PTREAD_TORCH_PYTHON:-python3}
deadline=$((SECONDS + ${PTREAD_GPU_DEADLINE:-540}))
mkdir -p "$out"
cd "$root" || exit 1
export PATH=$PATH:/usr/local/cuda/bin
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d $d ]] && export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
done

# step NAME CAP_SECONDS LOG COMMAND...: runs COMMAND with at most CAP seconds (less when the
# deadline is nearer), appending to OUT/LOG, and says how it ended.
step() {
  local name=$1 cap=$2 log=$out/$3
  shift 3
  local left=$((deadline - SECONDS - 5))
  ((left < cap)) && cap=$left
  if ((cap < 5)); then
    echo "== $name: not run (deadline)" | tee -a "$log"
    return 1
  fi
  echo "== $name (at most ${cap}s): $*" >>"$log"
  local t0=$SECONDS rc
  timeout -k 5 "$cap" "$@" >>"$log" 2>&1
  rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0))s" | tee -a "$log"
  return $rc
}

{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "avx512: $(grep -o -m1 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  free -g | head -2
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
  nvcc --version | tail -2
  ldd --version | head -1
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

# The programs: BUILD_DIR's, else built here.
bin=$(mktemp -d)
trap 'rm -rf "$bin" "${t2:-}"' EXIT
catch=${PTREAD_CATCH_INCLUDE:-/usr/include}
zlib=()
[[ -f /usr/include/zlib.h ]] && zlib=(-DPTREAD_WITH_ZLIB=1 -lz)
nvcc_flags=(-std=c++17 -O2 -arch=sm_90 -Iinclude -Itests -Itests/cuda -Iexamples -I"$catch"
  -DPTREAD_TEST_FIXTURES="\"$root/tests/fixtures\"" -DPTREAD_TEST_CORPUS="\"$root/../shared/corpus\"")
pick() {  # pick NAME BUILD_PATH SOURCES...: a program that starts, into $bin/NAME
  local name=$1 built=$build/$2
  shift 2
  if [[ -x $built ]] && ! ldd "$built" 2>&1 | grep -q 'not found'; then
    cp "$built" "$bin/$name"
    echo "$name: from $built"
  else
    step "build $name" 300 build.txt nvcc "${nvcc_flags[@]}" "$@" "${zlib[@]}" -o "$bin/$name"
  fi
}
pick ptread_cuda_tests tests/cuda/ptread_cuda_tests tests/main.cpp tests/cuda/all.cu
pick cuda_bench bench/cuda_bench bench/cuda_bench.cu
pick cuda_split examples/cuda_split examples/cuda_split.cu
if [[ -x $build/ptread ]] && ! ldd "$build/ptread" 2>&1 | grep -q 'not found'; then
  cp "$build/ptread" "$bin/ptread"
else
  step "build ptread" 300 build.txt g++ -std=c++17 -O2 -pthread -Iinclude tools/ptread.cpp "${zlib[@]}" -o "$bin/ptread"
fi

# Fixtures saved from real CUDA tensors, first: the upload tests read them.
step fixtures 120 fixtures.txt "$py" tests/fixtures/gen_cuda.py &&
  step "fixtures --check" 60 fixtures.txt "$py" tests/fixtures/gen_cuda.py --check tests/fixtures/cuda &&
  tar -cf "$out/cuda_fixtures.tar" -C tests/fixtures cuda

# Torch 2.x's own forms, and ptread's writers read back by torch 2.x.
t2=$(mktemp -d)
step "torch2 fixtures" 120 torch2.txt "$py" tests/fixtures/gen_torch2.py --out "$t2/torch2" &&
  step "torch2 fixtures --check" 60 torch2.txt "$py" tests/fixtures/gen_torch2.py --check "$t2/torch2" &&
  tar -cf "$out/torch2_fixtures.tar" -C "$t2" torch2
step "writers under torch 2.x" 120 torch2.txt "$py" tests/writers/check_writers_torch2.py "$bin/ptread" "$t2/w" \
  tests/fixtures/torch2/t2_{sd,nocrc,align4k,legacy,subclass,model,train,script}.pt tests/fixtures/torch2/t2_dtype_*.pt \
  tests/fixtures/cuda/*.pt

export PTREAD_FIXTURES=$root/tests/fixtures PTREAD_NN_FIXTURES=$root/tests/fixtures/nn
step "cuda tests" 240 cuda_tests.txt "$bin/ptread_cuda_tests" --durations yes
step "cuda_split example" 30 cuda_tests.txt "$bin/cuda_split" examples/nn_model.pt

mkdir -p "$bin/build/bench"
cp "$bin/cuda_bench" "$bin/build/bench/cuda_bench" 2>/dev/null
step "bench/run_cuda.sh" 240 bench.txt env PTREAD_TORCH_PYTHON="$py" \
  bash bench/run_cuda.sh "$bin/build" /tmp/ptread-cuda-bench "${PTREAD_GPU_BENCH_GIB:-4}"

step "adversarial corpus under torch 2.x" 90 torch2_adversarial.txt \
  env TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 "$py" tests/data/adversarial/check_torch.py
step "memcheck" 300 memcheck.txt compute-sanitizer --tool memcheck --error-exitcode 3 \
  "$bin/ptread_cuda_tests" "[linear],[embedding],[split]"
echo "done in ${SECONDS}s"
