/* mpi_allreduce: MPI_Allreduce (MPI_FLOAT, MPI_SUM) time and bandwidth over a list
 * of sizes, measured the same way as `tccl bench`, so that the two can be compared
 * row by row (see bench/README.md and bench/compare_mpi.sh).
 *
 * Per size:
 *   1. correctness pass: rank r holds r+1 in every element; every output element
 *      must equal n(n+1)/2; #wrong counts the elements that do not (max over ranks);
 *   2. `warmup` untimed iterations;
 *   3. MPI_Barrier to line the ranks up;
 *   4. `iters` timed iterations; time = elapsed / iters on each rank, then the max
 *      over ranks (MPI_Allreduce with MPI_MAX): the slowest rank's average.
 *   algbw = bytes / time (1e9 B/s), busbw = algbw * 2(n-1)/n.
 * Like tccl bench, the size is rounded down to whole floats (at least one).
 * The output buffer is separate from the input (not MPI_IN_PLACE), as in tccl bench.
 *
 * Usage: mpirun -np N ./mpi_allreduce [--iters I] [--warmup W] [--csv] SIZE...
 *   SIZE: bytes, with an optional K/M/G suffix (binary: 1K = 1024), or a
 *   comma-separated list of them.
 *   --csv: instead of the table, one line per size:
 *     csv,world,size,count,time_us,algbw_gbps,busbw_gbps,wrong
 *   and a final line: rss,world,peak_rss_mib_per_rank (max over ranks).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static int parse_size(const char* s, unsigned long long* out) {
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return -1;
  unsigned long long mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1ULL << 10, ++end;
  else if (*end == 'M' || *end == 'm') mult = 1ULL << 20, ++end;
  else if (*end == 'G' || *end == 'g') mult = 1ULL << 30, ++end;
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return -1;
  *out = v * mult;
  return 0;
}

static double max_over_ranks(double v) {
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

static void usage(int rank) {
  if (rank == 0) {
    fprintf(stderr, "usage: mpirun -np N mpi_allreduce [--iters I] [--warmup W] [--csv] SIZE[,SIZE...]...\n");
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);

  int iters = 20, warmup = 5, csv = 0;
  unsigned long long sizes[64];
  int nsizes = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) {
      warmup = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--csv") == 0) {
      csv = 1;
    } else {
      char* copy = strdup(argv[i]);
      for (char* tok = strtok(copy, ","); tok != NULL; tok = strtok(NULL, ",")) {
        if (nsizes == 64 || parse_size(tok, &sizes[nsizes]) != 0) {
          if (rank == 0) fprintf(stderr, "mpi_allreduce: bad size '%s'\n", tok);
          usage(rank);
          MPI_Abort(MPI_COMM_WORLD, 2);
        }
        ++nsizes;
      }
      free(copy);
    }
  }
  if (nsizes == 0 || iters < 1 || warmup < 0) {
    usage(rank);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  if (rank == 0 && !csv) {
    printf("# mpi_allreduce: world %d, dtype float32, op sum, %d warm-up + %d timed iterations\n", n, warmup,
           iters);
    printf("# %12s %12s %12s %10s %10s %7s\n", "size", "count", "time(us)", "algbw", "busbw", "#wrong");
    printf("# %12s %12s %12s %10s %10s %7s\n", "(B)", "(elements)", "", "(GB/s)", "(GB/s)", "");
    fflush(stdout);
  }

  const float expected = (float)n * (float)(n + 1) / 2.0f;
  for (int s = 0; s < nsizes; ++s) {
    size_t count = (size_t)(sizes[s] / sizeof(float));
    if (count == 0) count = 1;
    const size_t bytes = count * sizeof(float);
    if (count > 0x7fffffffULL) {
      if (rank == 0) fprintf(stderr, "mpi_allreduce: size %llu too large for an int count\n", sizes[s]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    float* in = (float*)malloc(bytes);
    float* out = (float*)malloc(bytes);
    if (in == NULL || out == NULL) {
      fprintf(stderr, "mpi_allreduce: rank %d: out of memory for %zu bytes\n", rank, bytes);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < count; ++i) in[i] = (float)(rank + 1);
    memset(out, 0, bytes);

    /* Correctness pass. */
    MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      if (out[i] != expected) wrong += 1;
    }

    for (int i = 0; i < warmup; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double sec = (MPI_Wtime() - t0) / iters;
    sec = max_over_ranks(sec);
    wrong = max_over_ranks(wrong);
    const double algbw = (double)bytes / sec / 1e9;
    const double busbw = n > 1 ? algbw * 2.0 * (n - 1) / n : 0.0;
    if (rank == 0) {
      if (csv) {
        printf("csv,%d,%zu,%zu,%.3f,%.6f,%.6f,%.0f\n", n, bytes, count, sec * 1e6, algbw, busbw, wrong);
      } else {
        printf("  %12zu %12zu %12.2f %10.3f %10.3f %7.0f\n", bytes, count, sec * 1e6, algbw, busbw, wrong);
      }
      fflush(stdout);
    }
    free(in);
    free(out);
  }

  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  getrusage(RUSAGE_SELF, &ru);
  const double peak = max_over_ranks((double)ru.ru_maxrss / 1024.0);
  if (rank == 0) {
    if (csv) {
      printf("rss,%d,%.1f\n", n, peak);
    } else {
      printf("# peak RSS per rank (max over ranks): %.1f MiB\n", peak);
    }
  }
  MPI_Finalize();
  return 0;
}
