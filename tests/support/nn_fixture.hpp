// tests/fixtures/nn (written by tests/fixtures/gen_nn.py): the checkpoint nn.pt, what torch
// computed on it (expected.json, and outputs.pt for the largest), and the json readers the nn
// tests share.
#pragma once

#include "helpers.hpp"

#include <cstdlib>
#include <string>
#include <vector>

namespace ptread_test {

inline std::string nn_dir() {
  const char* env = std::getenv("PTREAD_NN_FIXTURES");
  return env && *env ? std::string(env) : fixture_dir() + "/nn";
}

inline const Json& nn_json() { return cached_json(nn_dir() + "/expected.json"); }

inline const ptread::Checkpoint& nn_ck() {
  static ptread::Result<ptread::Checkpoint> ck = ptread::Checkpoint::open(nn_dir() + "/nn.pt");
  if (!ck) FAIL(ck.error().what());
  return *ck;
}

// outputs.pt: torch's outputs too large for the json, which names them.
inline const ptread::Checkpoint& nn_outputs() {
  static ptread::Result<ptread::Checkpoint> ck = ptread::Checkpoint::open(nn_dir() + "/outputs.pt");
  if (!ck) FAIL(ck.error().what());
  return *ck;
}

inline std::vector<int64_t> ints(const Json& j) {
  std::vector<int64_t> v;
  for (size_t k = 0; k < j.size(); ++k) v.push_back(j[k].as_int());
  return v;
}
inline std::vector<float> floats(const Json& j) {
  std::vector<float> v;
  for (size_t k = 0; k < j.size(); ++k) v.push_back(static_cast<float>(j[k].as_double()));
  return v;
}
// A Linear case's torch output [m x n]: its floats in the json, or the tensor of outputs.pt
// the json names.
inline std::vector<float> linear_out(const Json& e, size_t m, size_t n) {
  if (!e["out"].is_string()) return floats(e["out"]);
  const ptread::Tensor* out = nn_outputs().find(e["out"].as_string());
  REQUIRE(out != nullptr);
  REQUIRE(out->shape() == std::vector<int64_t>{static_cast<int64_t>(m), static_cast<int64_t>(n)});
  return out->to_float32().value();
}
inline std::vector<int32_t> narrow(const std::vector<int64_t>& v) {
  std::vector<int32_t> r;
  for (int64_t x : v) r.push_back(static_cast<int32_t>(x));
  return r;
}
// The inputs gen_nn.py computes by formula for the large cases.
inline std::vector<float> formula_x(size_t m, size_t k) {
  std::vector<float> x(m * k);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<double>(i * 7919 % 1000) / 500.0 - 1.0);
  return x;
}

}  // namespace ptread_test
