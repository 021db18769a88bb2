// libFuzzer target: a whole checkpoint: open, list, walk, materialize (tests/fuzz/targets.hpp).
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return ptread_fuzz::checkpoint_one(data, size); }
