// Tests that measure learning or whole-corpus statistics (thousands of optimizer steps, tens of
// thousands of scored tokens) run in the Release suite only: under AddressSanitizer they take
// minutes each and check no code path that the smaller exactness tests do not already run there.
#pragma once

#include <gtest/gtest.h>

// STRETCH_ASAN is 1 in a build with AddressSanitizer: g++ says so with __SANITIZE_ADDRESS__, clang
// (which builds the sanitizer suite) only through __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define STRETCH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STRETCH_ASAN 1
#endif
#endif
#ifndef STRETCH_ASAN
#define STRETCH_ASAN 0
#endif

#if STRETCH_ASAN
#define STRETCH_SKIP_UNDER_SANITIZER(why)                                                    \
  GTEST_SKIP() << "runs in the Release suite only (" << (why)                                \
               << "); under the sanitizers it takes minutes and adds no code path that the " \
                  "exactness tests do not run"
#else
#define STRETCH_SKIP_UNDER_SANITIZER(why) static_cast<void>(0)
#endif
