// libFuzzer target: the pickle VM with torch's hooks, naming (tests/fuzz/targets.hpp).
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return ptread_fuzz::pickle_one(data, size); }
