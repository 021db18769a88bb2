// ptread's nn layers behind a C interface, for bench/nn_pair.py: torch and ptread in one
// process, called in turns, so that both sides of each ratio run in the same moment of a
// noisy machine (ctypes calls these; a call costs about a microsecond of Python).
//
//   handle = ptread_pair_open(path)                      a Checkpoint (mmap mode), or NULL
//   layer  = ptread_pair_embedding(handle, prefix, threads)
//            ptread_pair_bag(handle, prefix, reduce, threads)   reduce: 0 sum, 1 mean, 2 max
//            ptread_pair_linear(handle, prefix, threads)
//   ptread_pair_*_forward(layer, ...)                    0 on success, else 1 (message on stderr)
//   ptread_pair_free(layer) / ptread_pair_close(handle)
// Errors are printed on stderr and give NULL or 1: the script stops on them.
#include <ptread/ptread.hpp>

#include <chrono>

#include <cstdint>
#include <cstdio>
#include <utility>

namespace {

namespace nn = ptread::nn;

struct Layer {
  nn::Embedding emb;
  nn::EmbeddingBag eb;
  nn::Linear fc;
};

int fail(const ptread::Error& e) {
  std::fprintf(stderr, "nn_pair: %s\n", e.what());
  return 1;
}

// A Layer holding *r, or NULL (the error printed).
template <class T>
void* make(ptread::Result<T> r, T Layer::*member) {
  if (!r) {
    fail(r.error());
    return nullptr;
  }
  auto* l = new Layer{};
  l->*member = std::move(*r);
  return l;
}

int status(const ptread::Status& s) { return s ? 0 : fail(s.error()); }

}  // namespace

#if defined(_WIN32)
#define PAIR_API __declspec(dllexport)
#else
#define PAIR_API __attribute__((visibility("default")))
#endif

extern "C" {

PAIR_API void* ptread_pair_open(const char* path) {
  auto ck = ptread::Checkpoint::open(path);
  if (!ck) {
    fail(ck.error());
    return nullptr;
  }
  return new ptread::Checkpoint(std::move(*ck));
}

PAIR_API void ptread_pair_close(void* handle) { delete static_cast<ptread::Checkpoint*>(handle); }

PAIR_API const char* ptread_pair_kernels() { return ptread::detail::nn_isa_name(ptread::detail::nn_isa()); }

// Kernel level: 0 generic, 1 AVX2, 2 AVX-512 (never above what the CPU has).
PAIR_API void ptread_pair_set_isa(int level) {
  ptread::detail::nn_set_isa(static_cast<ptread::detail::NnIsa>(level));
}

// How long ptread's workers poll for the next call after one (nn::set_spin_wait), in us.
PAIR_API void ptread_pair_set_spin(unsigned us) { ptread::nn::set_spin_wait(std::chrono::microseconds(us)); }
PAIR_API unsigned ptread_pair_spin() { return static_cast<unsigned>(ptread::nn::spin_wait().count()); }

PAIR_API void* ptread_pair_embedding(void* handle, const char* prefix, unsigned threads) {
  nn::EmbeddingOptions o;
  o.threads = threads;
  return make(nn::Embedding::from(*static_cast<ptread::Checkpoint*>(handle), prefix, o), &Layer::emb);
}

PAIR_API void* ptread_pair_bag(void* handle, const char* prefix, int reduce, unsigned threads) {
  nn::EmbeddingOptions o;
  o.threads = threads;
  const nn::Reduce r = reduce == 0 ? nn::Reduce::sum : reduce == 1 ? nn::Reduce::mean : nn::Reduce::max;
  return make(nn::EmbeddingBag::from(*static_cast<ptread::Checkpoint*>(handle), prefix, r, o), &Layer::eb);
}

PAIR_API void* ptread_pair_linear(void* handle, const char* prefix, unsigned threads) {
  nn::LinearOptions o;
  o.threads = threads;
  return make(nn::Linear::from(*static_cast<ptread::Checkpoint*>(handle), prefix, o), &Layer::fc);
}

PAIR_API int ptread_pair_embedding_forward(void* layer, const int64_t* idx, size_t n, float* out) {
  return status(static_cast<Layer*>(layer)->emb.forward(idx, n, out));
}

PAIR_API int ptread_pair_bag_forward(void* layer, const int64_t* idx, size_t n, const int64_t* offsets, size_t bags,
                            float* out) {
  return status(static_cast<Layer*>(layer)->eb.forward(idx, n, offsets, bags, nullptr, out));
}

PAIR_API int ptread_pair_linear_forward(void* layer, const float* x, size_t m, float* y) {
  return status(static_cast<Layer*>(layer)->fc.forward(x, m, y));
}

PAIR_API void ptread_pair_free(void* layer) { delete static_cast<Layer*>(layer); }

}  // extern "C"
