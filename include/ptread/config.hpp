// ptread — configuration macros.
//
// Every macro holds a value and is tested with #if, so -Wundef catches a misspelling.
// Define one before including ptread to override the detected default:
//   PTREAD_EXCEPTIONS  1 when the compiler has exceptions on; enables throwing wrappers
//                      (ptread::load, Result<T>::value_or_throw). The core never throws.
//   PTREAD_WITH_ZLIB   0 by default; 1 reads deflated zip records through zlib (link -lz).
//   PTREAD_ASSERT(x)   internal invariant check; defaults to assert(x).
#pragma once

#define PTREAD_VERSION_MAJOR 0
#define PTREAD_VERSION_MINOR 1
#define PTREAD_VERSION_PATCH 0
#define PTREAD_VERSION_STRING "0.1.0"

#ifndef PTREAD_EXCEPTIONS
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
#define PTREAD_EXCEPTIONS 1
#else
#define PTREAD_EXCEPTIONS 0
#endif
#endif

#ifndef PTREAD_WITH_ZLIB
#define PTREAD_WITH_ZLIB 0
#endif

#ifndef PTREAD_ASSERT
#include <cassert>
#define PTREAD_ASSERT(x) assert(x)
#endif

#if defined(_WIN32)
#define PTREAD_POSIX 0
#else
#define PTREAD_POSIX 1
#endif

// Internal: forces inlining. The nn layers' prefetch helpers need it: GCC finds a function
// whose only statements are __builtin_prefetch "const", and deletes calls to it whose
// result (void) is unused, so a helper that is not inlined before that analysis prefetches
// nothing (GCC 12 at -O2 and -O3 did this to every prefetch of the embedding layers until
// 2026-11-22).
#if defined(__GNUC__) || defined(__clang__)
#define PTREAD_ALWAYS_INLINE inline __attribute__((always_inline))
#elif defined(_MSC_VER)
#define PTREAD_ALWAYS_INLINE __forceinline
#else
#define PTREAD_ALWAYS_INLINE inline
#endif
