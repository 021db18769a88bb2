#!/usr/bin/env bash
# ptread on Windows, from this Debian machine: the unit suite, the `ptread` tool and the
# consumer program cross-compiled with MinGW-w64 (g++ 12, posix threads, static, zlib), run
# under Wine (64-bit). The tool's output is compared with the native build's.
#   bash tools/windows.sh [OUT_DIR] [NATIVE_PTREAD]
# Needs Debian's g++-mingw-w64-x86-64-posix, libz-mingw-w64-dev and wine64 (installed by
# `PTREAD_DEPS_WINDOWS=1 bash tools/deps.sh`, as tools/test.sh runs it). NATIVE_PTREAD (default
# build-test/gcc/ptread) is the Linux tool to compare with. Exits non-zero on a compile error,
# a failed test or an output that differs.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${1:-$root/build-test/windows}
native=${2:-$root/build-test/gcc/ptread}
cxx=x86_64-w64-mingw32-g++-posix
wine=$(command -v wine64 || command -v wine || ls /usr/lib/wine/wine64 2>/dev/null || true)
[[ -n $wine ]] || { echo "windows.sh: no wine64 (install Debian's wine64)" >&2; exit 1; }
mkdir -p "$out/obj" "$out/inc"
# The cross compiler searches none of /usr/include: Catch2 (a single header) is taken from there.
ln -sfn /usr/include/catch2 "$out/inc/catch2"
flags=(-std=c++17 -O1 -Wall -Wextra -Wpedantic -Wconversion -Wshadow -Wundef -Werror -Iinclude -Itests
  -isystem "$out/inc" -DPTREAD_WITH_ZLIB=1)
export WINEPREFIX=$out/wineprefix WINEDEBUG=-all
# One Wine server for every run (started once, stopped at the end): a server started by each
# run and stopping after it can leave the next run without one ("recvmsg: Connection reset").
wineserver=$(command -v wineserver || ls "$(dirname "$wine")/wineserver" 2>/dev/null || true)
run() { "$wine" "$@"; }
start_wine() {  # (the server and Wine's services get /dev/null: none keeps this script's output open)
  mkdir -p "$WINEPREFIX"  # (the server starts in it)
  if [[ -n $wineserver ]]; then
    "$wineserver" -p </dev/null >/dev/null 2>&1
    trap '"$wineserver" -k </dev/null >/dev/null 2>&1 || true' EXIT
  fi
  run cmd /c exit 0 </dev/null >/dev/null 2>&1 || true  # makes the prefix (its first start prints notes)
}

echo "== compiling (MinGW-w64)"
# Every compile one job in a pool of one per core, the longest first: the unit tests in
# batches of six sources (as the unity builds do), then the tool and the consumer programs
# (through the headers, beside <windows.h> included before ptread and after it, and through
# the single header alone, without zlib).
q() { printf '%q ' "$@"; }
fixtures="-DPTREAD_TEST_FIXTURES=\"$root/tests/fixtures\""
corpus="-DPTREAD_TEST_CORPUS=\"$root/../shared/corpus\""
sources=(tests/unit/*.cpp)
rm -f "$out"/obj/*.o
: >"$out/compiles"
for ((i = 0; i < ${#sources[@]}; i += 6)); do
  b=$out/obj/batch$((i / 6)).cpp
  : >"$b"
  for f in "${sources[@]:i:6}"; do printf '#include "%s"\n' "$root/$f" >>"$b"; done
  echo "$(q "$cxx" "${flags[@]}" "$fixtures" "$corpus" -c "$b" -o "${b%.cpp}.o")" >>"$out/compiles"
done
{
  q "$cxx" "${flags[@]}" -c tests/main.cpp -o "$out/obj/main.o"; echo
  q "$cxx" "${flags[@]}" -Itools -static tools/ptread.cpp -o "$out/ptread.exe" -lz; echo
  q "$cxx" "${flags[@]}" -static tests/consumers/main.cpp -o "$out/consumer.exe" -lz; echo
  for first in 0 1; do
    q "$cxx" "${flags[@]}" -DPTREAD_WINDOWS_H_FIRST=$first -static tests/consumers/windows_h.cpp \
      -o "$out/windows_h$first.exe" -lz; echo
  done
  q "$cxx" -std=c++17 -O1 -Wall -Wextra -Wpedantic -Wconversion -Wshadow -Wundef -Werror -Isingle_include -static \
    tests/consumers/main.cpp -o "$out/consumer_single.exe"; echo
} >>"$out/compiles"
xargs -P "$(nproc)" -d '\n' -I{} bash -c {} <"$out/compiles"
$cxx -static "$out"/obj/*.o -o "$out/ptread_tests.exe" -lz

start_wine
echo "== unit tests (Wine)"
# In two processes side by side: the tar sweep (half the time) and the rest.
run "$out/ptread_tests.exe" --warn NoTests "[sweep_tar]" >"$out/unit_tar.log" 2>&1 &
tar_pid=$!
rest=0
run "$out/ptread_tests.exe" --warn NoTests "~[.]~[sweep_tar]" >"$out/unit.log" 2>&1 || rest=$?
tar=0
wait "$tar_pid" || tar=$?
for part in unit_tar unit; do
  if [[ $part == unit_tar && $tar != 0 ]] || [[ $part == unit && $rest != 0 ]]; then
    tr -d '\r' <"$out/$part.log" | tail -n 80
    exit 1
  fi
  tr -d '\r' <"$out/$part.log" | tail -n 2 | head -n 1
done

echo "== consumer program (Wine)"
for exe in consumer consumer_single windows_h0 windows_h1; do
  run "$out/$exe.exe" examples/model.pt | tr -d '\r' | tail -n 1
done

echo "== ptread.exe against the native tool"
# ptread.exe's output and exit status (the tool writes text: Windows ends its lines with CR
# LF). Wine itself fails now and then on a loaded machine: its client loses the server
# ("wine client error:..." in the output) or the program never starts (no output at all, exit
# status 1; the tool prints a message whenever it fails). Such a run is tried again, twice at
# most, and said on stderr; any other difference from the native tool fails the stage.
tool_output() {
  local w try
  for try in 1 2 3; do
    w=$(run "$out/ptread.exe" "$@" 2>&1 | tr -d '\r'; echo "rc ${PIPESTATUS[0]}")
    if [[ $w != *"wine client error"* && $w != "rc 1" ]]; then break; fi
    echo "windows.sh: Wine failed to run ptread.exe $* (try $try): ${w:0:120}" >&2
  done
  printf '%s' "$w"
}
[[ -x $native ]] || { echo "windows.sh: no native tool at $native" >&2; exit 1; }
n=0
for f in examples/model.pt tests/fixtures/*.pt tests/fixtures/*.pth; do
  [[ -f $f ]] || continue
  for cmd in "ls" "ls --json" "tree"; do
    w=$(tool_output $cmd "$f")
    l=$("$native" $cmd "$f" 2>&1; echo "rc $?")
    if [[ $w != "$l" ]]; then
      echo "ptread.exe $cmd $f differs from the native tool:" >&2
      diff <(echo "$l") <(echo "$w") | head -n 20 >&2
      exit 1
    fi
  done
  if "$native" export "$f" "$out/native.safetensors" >/dev/null 2>&1; then
    tool_output export "$f" "$out/windows.safetensors" >/dev/null
    cmp "$out/native.safetensors" "$out/windows.safetensors"
  fi
  n=$((n + 1))
done
echo "$n files: ls, ls --json, tree and export as the native tool gives them"
