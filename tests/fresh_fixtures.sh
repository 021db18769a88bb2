#!/bin/sh
# Writes fresh random checkpoints with real torch (a new seed each run) and runs the
# fixture tests against them. Usage: fresh_fixtures.sh TEST_BINARY GENERATOR OUT_DIR
set -eu
bin=$1 gen=$2 out=$3
seed=${PTREAD_FRESH_SEED:-$(date +%s)}
rm -rf "$out"
mkdir -p "$out"
echo "fresh fixtures: seed $seed in $out"
"${PTREAD_TORCH_PYTHON:-/usr/bin/python3}" "$gen" --out "$out" --seed "$seed"
PTREAD_FIXTURES="$out" exec "$bin" "[fixtures]"
