// What every consumer program of tools/consumers.sh checks, however it took ptread in: it opens
// examples/model.pt and compares what it holds with what torch 1.13's torch.load gives for it
// (examples/make_example.py wrote it), then prints the configuration it was compiled with.
#pragma once

#include <ptread/ptread.hpp>

#include <cstdio>
#include <cstring>

inline int check_model(const char* path) {
  auto ck = ptread::Checkpoint::open(path);
  if (!ck) {
    std::fprintf(stderr, "%s\n", ck.error().what());
    return 1;
  }
  int failures = 0;
  auto expect = [&failures](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "consumer: FAILED: %s\n", what);
      ++failures;
    }
  };
  expect(std::strcmp(ck->format_name(), "zip") == 0, "format zip");
  expect(ck->tensors().size() == 27, "27 tensors");
  auto epoch = ck->root()["epoch"].as_int();
  expect(epoch && *epoch == 12, "epoch 12");
  const ptread::Tensor* bias = ck->find("model_state_dict.4.bias");
  expect(bias != nullptr, "model_state_dict.4.bias is listed");
  if (bias) {
    expect(bias->dtype() == ptread::DType::F32 && bias->shape().size() == 1 && bias->shape()[0] == 10 &&
               bias->device() == "cuda:0",
           "model_state_dict.4.bias is F32 [10] saved from cuda:0");
    auto values = bias->to_float32();
    expect(values && values->size() == 10 && (*values)[0] == 0.04740949347615242f &&
               (*values)[2] == -0.04803760349750519f,
           "model_state_dict.4.bias[0] and [2] as torch reads them");
  }
  std::printf("consumer: %s: %zu tensors, epoch %lld; PTREAD_EXCEPTIONS %d, PTREAD_WITH_ZLIB %d; %s\n", path,
              ck->tensors().size(), epoch ? static_cast<long long>(*epoch) : -1LL, PTREAD_EXCEPTIONS,
              PTREAD_WITH_ZLIB, failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
