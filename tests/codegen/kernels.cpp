// Compiled to assembly (never linked) by check_kernels.py, which checks two things the
// compiler once got wrong without a word:
// - The embedding layers issue prefetch instructions, Embedding in its gather loop and
//   EmbeddingBag in its bag kernels (every instruction-set build of them). GCC once deleted
//   every one of them (a helper that only prefetches looks "const" to it, and a call to a
//   const function whose result is unused is dead code; see PTREAD_ALWAYS_INLINE), which
//   made Embedding up to 2x slower.
// - Linear's micro-kernels have their loops over the rows of x and of W unrolled, one vector
//   FMA per accumulator, at -O2 as at -O3. GCC 12 at -O2 left them rolled, the accumulators
//   in memory, and Linear ran 2-5x slower than in a -O3 build (PTREAD_NN_UNROLL).
// Case 0 is the control: the same header, no layer called, no prefetch, no micro-kernel.
#include <ptread/ptread.hpp>

#if PTREAD_CODEGEN_CASE == 1
size_t codegen_embedding(const ptread::nn::Embedding& e, const int64_t* idx, size_t n, float* out) {
  return e.forward(idx, n, out) ? n : 0;
}
size_t codegen_bag(const ptread::nn::EmbeddingBag& e, const int64_t* idx, size_t n, const int64_t* offsets,
                   size_t bags, float* out) {
  return e.forward(idx, n, offsets, bags, nullptr, out) ? bags : 0;
}
size_t codegen_linear(const ptread::nn::Linear& l, const float* x, size_t m, float* y) {
  return l.forward(x, m, y) ? m : 0;
}
#else
size_t codegen_case(const ptread::nn::Embedding& e) { return e.dim(); }
#endif
