// ptread's nn layers behind a C interface, for bench/nn_pair.py: torch and ptread in one
// process, called in turns, so that both sides of each ratio run in the same moment of a
// noisy machine (ctypes calls these; a call costs about a microsecond of Python).
//
//   handle = ptread_pair_open(path, read_mode)           a Checkpoint (mmap mode, or read mode), or NULL
//   layer  = ptread_pair_embedding(handle, prefix, threads)
//            ptread_pair_bag(handle, prefix, reduce, threads)   reduce: 0 sum, 1 mean, 2 max
//            ptread_pair_linear(handle, prefix, threads)
//   ptread_pair_*_forward(layer, ...)                    0 on success, else 1 (message on stderr)
//   ptread_pair_free(layer) / ptread_pair_close(handle)
//   ptread_pair_data(handle, name, &nbytes), ptread_pair_touch(handle, name): a tensor's bytes
//   ptread_pair_huge(layer): whether an Embedding's table was advised for 2 MiB pages
// Errors are printed on stderr and give NULL or 1: the script stops on them.
#include <ptread/ptread.hpp>

#include <chrono>

#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

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

PAIR_API void* ptread_pair_open(const char* path, int read_mode) {
  ptread::Options o;
  o.mode = read_mode ? ptread::LoadMode::read : ptread::LoadMode::mmap;
  auto ck = ptread::Checkpoint::open(path, o);
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

// The address and size of the named tensor's bytes (0 when there is none).
PAIR_API const void* ptread_pair_data(void* handle, const char* name, size_t* nbytes) {
  auto t = static_cast<ptread::Checkpoint*>(handle)->get(name);
  if (!t) {
    fail(t.error());
    return nullptr;
  }
  *nbytes = t->nbytes();
  return t->data_ptr();
}

// Reads a byte of every 4 KiB of the named tensor, the pages in a random order, so that
// they are faulted in now as lookups of random rows would fault them in (through the
// mapping, in mmap mode: from the disk when the file is not cached).
PAIR_API unsigned ptread_pair_touch(void* handle, const char* name) {
  size_t n = 0;
  const auto* p = static_cast<const volatile unsigned char*>(ptread_pair_data(handle, name, &n));
  if (p == nullptr) return 0;
  std::vector<size_t> order(n / 4096 + (n % 4096 != 0));
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  uint64_t x = 88172645463325252ull;  // xorshift64: the same order every run
  for (size_t k = order.size(); k > 1; --k) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::swap(order[k - 1], order[x % k]);
  }
  unsigned sum = 0;
  for (size_t k : order) sum += p[k * 4096];
  return sum;
}

PAIR_API int ptread_pair_huge(void* layer) { return static_cast<Layer*>(layer)->emb.huge_pages() ? 1 : 0; }

PAIR_API void ptread_pair_free(void* layer) { delete static_cast<Layer*>(layer); }

}  // extern "C"
