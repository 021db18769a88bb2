// The split case: the embedding table stays in host memory (read in place from the mapped
// checkpoint by the CPU layer), only the rows a batch needs travel to the GPU through pinned
// memory, and the Linear runs there.
//   cuda_split examples/nn_model.pt
// Same model and batch as nn_embedding.cpp (saved from cuda:0 by make_nn_example.py); prints
// the result beside torch's. Exit status 0 when every value matches torch within float
// tolerance, 77 when there is no CUDA device.
#include <ptread/cuda.cuh>

#include "beside_torch.hpp"

#include <cstdio>
#include <vector>

namespace {
int fail(const ptread::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s nn_model.pt\n", argv[0]);
    return 2;
  }
  auto devices = ptread::cuda::device_count();
  if (!devices || *devices == 0) {
    std::printf("skipped: no CUDA device (%s)\n", devices ? "none found" : devices.error().what());
    return 77;
  }
  auto ck = ptread::Checkpoint::open(argv[1]);
  if (!ck) return fail(ck.error());
  auto emb = ptread::nn::Embedding::from(*ck, "model_state_dict.emb");  // CPU: host memory
  auto fc = ptread::cuda::Linear::from(*ck, "model_state_dict.fc");    // GPU
  auto ids_t = ck->get("reference.ids");
  auto want_t = ck->get("reference.torch_output");
  if (!emb) return fail(emb.error());
  if (!fc) return fail(fc.error());
  if (!ids_t) return fail(ids_t.error());
  if (!want_t) return fail(want_t.error());
  std::printf("%s\nemb: %zu x %zu %s in host memory, fc: %zu -> %zu %s on the GPU\n",
              ptread::cuda::device_description().value().c_str(), emb->num_embeddings(), emb->dim(),
              ptread::dtype_name(emb->weight().dtype()), fc->in_features(), fc->out_features(),
              ptread::dtype_name(fc->dtype()));

  const int64_t* ids = ids_t->data<int64_t>().value();
  const size_t n = static_cast<size_t>(ids_t->numel());
  auto stream = ptread::cuda::Stream::create();
  auto staging = ptread::cuda::HostStaging::create(n * emb->dim());
  auto y = ptread::cuda::DeviceBuffer::allocate(n * fc->out_features() * sizeof(float));
  if (!stream) return fail(stream.error());
  if (!staging) return fail(staging.error());
  if (!y) return fail(y.error());
  auto rows = ptread::cuda::embedding_to_device(*emb, ids, n, *staging, stream->get());  // gather, ship
  if (!rows) return fail(rows.error());
  if (auto st = fc->forward(*rows, n, static_cast<float*>(y->data()), stream->get()); !st) return fail(st.error());
  std::vector<float> out(n * fc->out_features());
  if (auto st = ptread::cuda::cuda_check(cudaMemcpyAsync(out.data(), y->data(), out.size() * sizeof(float),
                                                         cudaMemcpyDeviceToHost, stream->get()),
                                         "cudaMemcpyAsync");
      !st) {
    return fail(st.error());
  }
  if (auto st = stream->synchronize(); !st) return fail(st.error());

  const std::vector<float> want = want_t->to_float32().value();
  const bool ok = print_beside_torch(ids, n, fc->out_features(), out, want);
  return ok ? 0 : 1;
}
