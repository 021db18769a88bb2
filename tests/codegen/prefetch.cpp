// Compiled to assembly (never linked) by check_prefetch.py: the embedding layers must issue
// prefetch instructions, Embedding in its gather loop and EmbeddingBag in its bag kernels
// (every instruction-set build of them). GCC once deleted every one of them without a word
// (a helper that only prefetches looks "const" to it, and a call to a const function whose
// result is unused is dead code; see PTREAD_ALWAYS_INLINE), which made Embedding up to 2x
// slower. Case 0 is the control: the same header, no layer called, no prefetch.
#include <ptread/ptread.hpp>

#if PTREAD_CODEGEN_CASE == 1
size_t codegen_embedding(const ptread::nn::Embedding& e, const int64_t* idx, size_t n, float* out) {
  return e.forward(idx, n, out) ? n : 0;
}
size_t codegen_bag(const ptread::nn::EmbeddingBag& e, const int64_t* idx, size_t n, const int64_t* offsets,
                   size_t bags, float* out) {
  return e.forward(idx, n, offsets, bags, nullptr, out) ? bags : 0;
}
#else
size_t codegen_case(const ptread::nn::Embedding& e) { return e.dim(); }
#endif
