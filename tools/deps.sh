#!/usr/bin/env bash
# Installs what ptread's build, tests and benchmarks need, from Debian's packages by name.
# Safe to run again; needs root (or sudo).
set -euo pipefail
pkgs=(g++ clang cmake ninja-build meson pkg-config catch2 zlib1g-dev libopenblas-dev python3 python3-torch python3-numpy)
if [[ ${PTREAD_DEPS_SANITIZERS:-1} == 1 ]]; then pkgs+=(libclang-rt-14-dev); fi
# Windows, cross-compiled and run under Wine (tools/windows.sh; tools/test.sh asks for it)
if [[ ${PTREAD_DEPS_WINDOWS:-0} == 1 ]]; then pkgs+=(g++-mingw-w64-x86-64-posix libz-mingw-w64-dev wine64); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "deps: all installed"
  exit 0
fi
sudo=""
if [[ $(id -u) != 0 ]]; then sudo="sudo"; fi
echo "deps: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
