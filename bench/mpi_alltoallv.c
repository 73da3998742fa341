/* mpi_alltoallv: MPI_Alltoallv (MPI_FLOAT) with skewed counts, measured as
 * `tccl bench --op alltoallv --skew K` measures (tools/bench_uneven.hpp), so that the two
 * compare row by row (bench/compare_alltoallv.sh).
 *
 * Counts: a unit is c floats, c = max(1, SIZE / 4 / (K + n - 1)); rank 0 sends K units
 * to every rank (itself included), every other rank 1 unit; packed displacements. The
 * row's size is (K + n - 1) x c x 4 bytes (the sum of the N blocks a rank receives).
 * Per size: a correctness pass (rank r sends r+1 everywhere; block p of every output
 * must hold p+1: #wrong, max over ranks), `warmup` untimed calls, MPI_Barrier, `iters`
 * timed calls; time = the slowest rank's average.
 *
 * Usage: mpirun -np N ./mpi_alltoallv [--skew K] [--iters I] [--warmup W] SIZE...
 * Prints one line per size: csv,world,skew,size,time_us,wrong
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long parse_size(const char* s) {
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end == 'K' || *end == 'k')
    v <<= 10;
  else if (*end == 'M' || *end == 'm')
    v <<= 20;
  else if (*end == 'G' || *end == 'g')
    v <<= 30;
  return v;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int skew = 8, iters = 20, warmup = 5;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--skew") == 0 && i + 1 < argc) {
      skew = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) {
      warmup = atoi(argv[++i]);
    } else {
      const unsigned long long bytes = parse_size(argv[i]);
      size_t unit = (size_t)(bytes / 4 / (unsigned long long)(skew + n - 1));
      if (unit == 0) unit = 1;
      int* sc = malloc(sizeof(int) * (size_t)n);
      int* sd = malloc(sizeof(int) * (size_t)n);
      int* rc = malloc(sizeof(int) * (size_t)n);
      int* rd = malloc(sizeof(int) * (size_t)n);
      size_t sendTotal = 0, recvTotal = 0;
      for (int p = 0; p < n; ++p) {
        sc[p] = (int)(unit * (size_t)(rank == 0 ? skew : 1));
        rc[p] = (int)(unit * (size_t)(p == 0 ? skew : 1));
        sd[p] = (int)sendTotal;
        rd[p] = (int)recvTotal;
        sendTotal += (size_t)sc[p];
        recvTotal += (size_t)rc[p];
      }
      float* in = malloc(sizeof(float) * sendTotal);
      float* out = malloc(sizeof(float) * recvTotal);
      for (size_t j = 0; j < sendTotal; ++j) in[j] = (float)(rank + 1);
      memset(out, 0, sizeof(float) * recvTotal);
      MPI_Alltoallv(in, sc, sd, MPI_FLOAT, out, rc, rd, MPI_FLOAT, MPI_COMM_WORLD);
      double wrong = 0;
      for (int p = 0; p < n; ++p)
        for (int j = 0; j < rc[p]; ++j)
          if (out[rd[p] + j] != (float)(p + 1)) wrong += 1;
      for (int i2 = 0; i2 < warmup; ++i2)
        MPI_Alltoallv(in, sc, sd, MPI_FLOAT, out, rc, rd, MPI_FLOAT, MPI_COMM_WORLD);
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (int i2 = 0; i2 < iters; ++i2)
        MPI_Alltoallv(in, sc, sd, MPI_FLOAT, out, rc, rd, MPI_FLOAT, MPI_COMM_WORLD);
      double sec = (MPI_Wtime() - t0) / iters, maxSec = 0, maxWrong = 0;
      MPI_Allreduce(&sec, &maxSec, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(&wrong, &maxWrong, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (rank == 0) {
        printf("csv,%d,%d,%llu,%.2f,%.0f\n", n, skew,
               (unsigned long long)((size_t)(skew + n - 1) * unit * 4), maxSec * 1e6, maxWrong);
      }
      free(in), free(out), free(sc), free(sd), free(rc), free(rd);
    }
  }
  MPI_Finalize();
  return 0;
}
