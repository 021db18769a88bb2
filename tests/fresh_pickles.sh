#!/bin/sh
# Writes random pickles of builtins with Python's pickle (a new seed each run: set
# PTREAD_FRESH_SEED to repeat one) and runs the pickle test on them, each read as
# pickle.loads reads it, or fails as it fails.
# Usage: fresh_pickles.sh TEST_BINARY GENERATOR OUT_DIR [PYTHON]
set -eu
bin=$1 gen=$2 out=$3 py=${4:-python3}
seed=${PTREAD_FRESH_SEED:-$(date +%s)}
rm -rf "$out"
mkdir -p "$out"
echo "fresh pickles: seed $seed in $out"
"$py" "$gen" --out "$out" --seed "$seed"
PTREAD_FIXTURES="$out" exec "$bin" "[pickle_cases]"
