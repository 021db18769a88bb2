// libFuzzer target: the zip directory and its records (tests/fuzz/targets.hpp).
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return ptread_fuzz::zip_one(data, size); }
