// How the nn examples end: each id's outputs printed beside torch's, and whether all match
// within float tolerance ("match torch" is what their CTest entries look for).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

inline bool print_beside_torch(const int64_t* ids, size_t n, size_t width, const std::vector<float>& out,
                               const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < n && want.size() == out.size(); ++i) {
    std::printf("id %4lld:", static_cast<long long>(ids[i]));
    for (size_t o = 0; o < width; ++o) {
      const size_t k = i * width + o;
      std::printf("  %+.6f (torch %+.6f)", static_cast<double>(out[k]), static_cast<double>(want[k]));
      worst = std::fmax(worst, std::fabs(static_cast<double>(out[k]) - want[k]));
    }
    std::printf("\n");
  }
  const bool ok = want.size() == out.size() && worst <= 1e-5;
  std::printf("max |ptread - torch| = %.3g: %s\n", worst, ok ? "match torch" : "MISMATCH");
  return ok;
}
