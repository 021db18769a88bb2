// libFuzzer target: a safetensors header's JSON, and the file it heads (tests/fuzz/targets.hpp).
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ptread_fuzz::safetensors_header_one(data, size);
}
