// bench/membw.c: this machine's memory bandwidth for the two passes an all-reduce makes
// over its data, to bound what a TCP all-reduce on one box can reach (docs/PERFORMANCE.md,
// "64 MiB: memory passes").
//
//   gcc -O2 -o membw bench/membw.c && ./membw [MiB] [reps]
//
// copy: memcpy(dst, src, L)       -> 2 L bytes touched (read src, write dst)
// add:  c[i] = a[i] + b[i], float -> 3 L bytes touched (read a, read b, write c)
// Prints, per kernel, the median over reps of L / time ("buffer GB/s") and of touched bytes /
// time ("touched GB/s"), 1 GB = 1e9 B. Buffers are written once before timing (no first-touch
// page faults in the timed loop). Run one copy per core at once to see the shared limit.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 64;
  const int reps = argc > 2 ? atoi(argv[2]) : 21;
  if (mib == 0 || reps <= 0) {
    fprintf(stderr, "usage: membw [MiB > 0] [reps > 0]\n");
    return 2;
  }
  const size_t len = mib << 20, n = len / sizeof(float);
  float* a = malloc(len);
  float* b = malloc(len);
  float* c = malloc(len);
  double* tc = malloc(sizeof(double) * (size_t)reps);
  double* ta = malloc(sizeof(double) * (size_t)reps);
  if (!a || !b || !c || !tc || !ta) return 1;
  for (size_t i = 0; i < n; ++i) {
    a[i] = (float)(i % 1000);
    b[i] = (float)(i % 7);
    c[i] = 0;
  }
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    memcpy(c, a, len);
    tc[r] = now() - t0;
    t0 = now();
    for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
    ta[r] = now() - t0;
  }
  // The result is checked, so the compiler keeps the loop and a wrong kernel shows.
  for (size_t i = 0; i < n; i += 4099) {
    if (c[i] != (float)(i % 1000) + (float)(i % 7)) {
      fprintf(stderr, "membw: wrong sum at %zu\n", i);
      return 1;
    }
  }
  qsort(tc, (size_t)reps, sizeof(double), cmp);
  qsort(ta, (size_t)reps, sizeof(double), cmp);
  const double mc = tc[reps / 2], ma = ta[reps / 2];
  printf("kernel,MiB,median_s,buffer_GBps,touched_GBps\n");
  printf("copy,%zu,%.6f,%.2f,%.2f\n", mib, mc, (double)len / mc / 1e9,
         2.0 * (double)len / mc / 1e9);
  printf("add,%zu,%.6f,%.2f,%.2f\n", mib, ma, (double)len / ma / 1e9, 3.0 * (double)len / ma / 1e9);
  free(a);
  free(b);
  free(c);
  free(tc);
  free(ta);
  return 0;
}
