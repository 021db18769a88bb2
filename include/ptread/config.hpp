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
