// Tests that take every file descriptor away from a process cannot run under UBSan: its
// vptr check probes the memory it inspects by writing it through a fresh pipe(2), which
// then fails, and it reports a false "object has invalid vptr" at the first virtual call it
// has not checked before (a log line's ostream, say). Such tests call this first; they
// skip in the TSan build too, where their CPU-time bound means little at its slowdown (the
// release phase runs them).
#pragma once

#include <gtest/gtest.h>

#ifdef TCCL_SANITIZED  // any sanitizer build (CMakeLists.txt)
#define TCCL_SKIP_WITHOUT_DESCRIPTORS_UNDER_SANITIZERS()                                     \
  GTEST_SKIP() << "sanitizer build: UBSan's vptr check needs free descriptors (it probes "   \
                  "memory through a pipe), which this test takes away, and TSan's slowdown " \
                  "blurs its CPU-time bound; it runs in the release suite"
#else
#define TCCL_SKIP_WITHOUT_DESCRIPTORS_UNDER_SANITIZERS() \
  do {                                                   \
  } while (0)
#endif
