#!/bin/sh
# Writes fresh nn fixtures with real torch (a new seed each run) and runs the nn tests on them.
# Usage: fresh_nn_fixtures.sh TEST_BINARY GENERATOR OUT_DIR
set -eu
bin=$1 gen=$2 out=$3
seed=${PTREAD_FRESH_SEED:-$(date +%s)}
rm -rf "$out"
mkdir -p "$out"
echo "fresh nn fixtures: seed $seed in $out"
"${PTREAD_TORCH_PYTHON:-/usr/bin/python3}" "$gen" --out "$out" --seed "$seed"
PTREAD_NN_FIXTURES="$out" exec "$bin" "[nn]"
