/* mpi_p2p: point-to-point latency and bandwidth between two MPI ranks, measured the
 * same way as `tccl p2pbench` (tools/p2pbench.cpp), so that the two can be compared
 * row by row (bench/README.md, bench/compare_p2p.sh). OSU micro-benchmark style:
 *
 *   latency        rank 0: MPI_Send then MPI_Recv; rank 1: MPI_Recv then MPI_Send;
 *                  time = half the round trip (osu_latency).
 *   latency_async  the same with MPI_Isend / MPI_Irecv: rank 0 posts its send and its
 *                  receive, then MPI_Waitall; rank 1 MPI_Irecv + MPI_Wait, then
 *                  MPI_Isend + MPI_Wait.
 *   bw             rank 0 posts a window of MPI_Isend of one size, MPI_Waitall; rank 1
 *                  as many MPI_Irecv, MPI_Waitall, then a 4-byte ack (MPI_Send) that
 *                  rank 0 receives (MPI_Recv); time = window time / window (osu_bw).
 *   bibw           both ranks post a window of MPI_Irecv, then one of MPI_Isend, and
 *                  MPI_Waitall; the bandwidth counts both directions (osu_bibw).
 *
 * Per mode and size: `warmup` untimed iterations, then `iters` timed ones split into
 * `reps` repetitions, each preceded by MPI_Barrier; the figure is the median over the
 * repetitions of rank 0's average per iteration. GB/s = 1e9 B/s: size / time (latency,
 * bw), 2 x size / time (bibw). Every message of a window uses the same buffer. Data:
 * the messages carry the pattern tccl p2pbench sends (a hash of the word index, the
 * size and the sender's rank); the receiver clears its buffer after the warm-up and
 * checks the last message it received; #wrong counts wrong bytes; any makes it exit 1.
 * Default iterations and warm-up by size are tccl p2pbench's.
 *
 * Usage: mpirun -np 2 ./mpi_p2p [--mode latency|latency_async|bw|bibw|all[,...]]
 *          [--sizes 8,64K,4M,64M] [--iters N] [--warmup N] [--window 64] [--reps 5]
 *   sizes: bytes with an optional K/M/G suffix (binary: 1K = 1024).
 * Output: tccl p2pbench's table (same columns), with a "# mpi_p2p" header.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LATENCY, LATENCY_ASYNC, BW, BIBW, NMODES };
static const char* kModeNames[NMODES] = {"latency", "latency_async", "bw", "bibw"};

static int parse_size(const char* s, unsigned long long* out) {
  char* end = NULL;
  if (*s < '0' || *s > '9') return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return -1;
  unsigned long long mult = 1;
  if (*end == 'K' || *end == 'k') {
    mult = 1ULL << 10;
    ++end;
  } else if (*end == 'M') {
    mult = 1ULL << 20;
    ++end;
  } else if (*end == 'G') {
    mult = 1ULL << 30;
    ++end;
  }
  if (mult > 1 && strcmp(end, "iB") == 0) {
    end += 2;
  } else if (*end == 'B') {
    ++end;
  }
  if (*end != '\0' || v == 0) return -1;
  *out = v * mult;
  return 0;
}

/* tccl p2pbench's defaults (tools/p2pbench.cpp): about 1 GiB of round trips per
 * latency row, 2 GiB per direction per bandwidth row. */
static unsigned long long clampu(unsigned long long v, unsigned long long lo,
                                 unsigned long long hi) {
  return v < lo ? lo : v > hi ? hi : v;
}
static int default_iters(int mode, unsigned long long size, int window) {
  if (mode == LATENCY || mode == LATENCY_ASYNC)
    return (int)clampu((1ULL << 30) / (2 * size), 10, 1000);
  return (int)clampu((2ULL << 30) / (size * (unsigned long long)window), 2, 100);
}
static int default_warmup(int iters) { return iters / 10 > 1 ? iters / 10 : 1; }

/* The message pattern, byte for byte the one of tccl p2pbench. */
static uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}
static uint32_t pattern_seed(unsigned long long size, int sender) {
  return mix32(((uint32_t)size * 2654435761U) ^ (uint32_t)(size >> 32) ^
               (((uint32_t)sender + 1) * 0x9e3779b9U));
}
static uint32_t pattern_word(size_t word, uint32_t seed) {
  return mix32((uint32_t)word ^ seed) + (uint32_t)word;
}
static void fill_pattern(unsigned char* p, size_t n, uint32_t seed) {
  for (size_t off = 0; off < n; off += 4) {
    uint32_t v = pattern_word(off / 4, seed);
    memcpy(p + off, &v, n - off < 4 ? n - off : 4);
  }
}
/* report[0] = wrong bytes, [1] first wrong index, [2] expected, [3] actual. */
static void check_pattern(const unsigned char* p, size_t n, uint32_t seed, long long report[4]) {
  report[0] = 0, report[1] = -1, report[2] = 0, report[3] = 0;
  for (size_t off = 0; off < n; off += 4) {
    uint32_t v = pattern_word(off / 4, seed);
    unsigned char want[4];
    memcpy(want, &v, 4);
    size_t k = n - off < 4 ? n - off : 4;
    for (size_t j = 0; j < k; ++j) {
      if (p[off + j] != want[j] && report[0]++ == 0) {
        report[1] = (long long)(off + j);
        report[2] = want[j];
        report[3] = p[off + j];
      }
    }
  }
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static int rank = 0, peer = 1, window = 64;
static unsigned char *sbuf, *rbuf;
static MPI_Request* reqs;

static void iteration(int mode, int n) {
  unsigned char ack[4] = {0, 0, 0, 0};
  switch (mode) {
    case LATENCY:
      if (rank == 0) {
        MPI_Send(sbuf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        MPI_Recv(rbuf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(rbuf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(sbuf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
      }
      break;
    case LATENCY_ASYNC:
      if (rank == 0) {
        MPI_Isend(sbuf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &reqs[0]);
        MPI_Irecv(rbuf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &reqs[1]);
        MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
      } else {
        MPI_Irecv(rbuf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &reqs[0]);
        MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
        MPI_Isend(sbuf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &reqs[0]);
        MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
      }
      break;
    case BW:
      for (int w = 0; w < window; ++w) {
        if (rank == 0) {
          MPI_Isend(sbuf, n, MPI_BYTE, peer, 100, MPI_COMM_WORLD, &reqs[w]);
        } else {
          MPI_Irecv(rbuf, n, MPI_BYTE, peer, 100, MPI_COMM_WORLD, &reqs[w]);
        }
      }
      MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
      if (rank == 0) {
        MPI_Recv(ack, 4, MPI_BYTE, peer, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Send(ack, 4, MPI_BYTE, peer, 101, MPI_COMM_WORLD);
      }
      break;
    case BIBW:
      for (int w = 0; w < window; ++w)
        MPI_Irecv(rbuf, n, MPI_BYTE, peer, 10, MPI_COMM_WORLD, &reqs[w]);
      for (int w = 0; w < window; ++w)
        MPI_Isend(sbuf, n, MPI_BYTE, peer, 10, MPI_COMM_WORLD, &reqs[window + w]);
      MPI_Waitall(2 * window, reqs, MPI_STATUSES_IGNORE);
      break;
  }
}

static void usage(void) {
  if (rank == 0)
    fprintf(stderr,
            "usage: mpirun -np 2 mpi_p2p [--mode latency|latency_async|bw|bibw|all[,...]] [--sizes "
            "LIST]\n"
            "         [--iters N] [--warmup N] [--window W] [--reps R] [--inject-error]\n");
  MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world != 2) {
    if (rank == 0) fprintf(stderr, "mpi_p2p: runs on exactly 2 ranks, not %d\n", world);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  peer = 1 - rank;

  int modes[NMODES], nmodes = 0, iters_arg = 0, warmup_arg = -1, reps_arg = 5, inject = 0, bad = 0;
  unsigned long long sizes[64];
  int nsizes = 0;
  const char* mode_arg = "all";
  const char* sizes_arg = "8,64K,4M,64M";
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const int more = i + 1 < argc;
    if (strcmp(a, "--mode") == 0 && more) {
      mode_arg = argv[++i];
    } else if (strcmp(a, "--sizes") == 0 && more) {
      sizes_arg = argv[++i];
    } else if (strcmp(a, "--iters") == 0 && more) {
      iters_arg = atoi(argv[++i]);
      bad |= iters_arg < 1;
    } else if (strcmp(a, "--warmup") == 0 && more) {
      warmup_arg = atoi(argv[++i]);
      bad |= warmup_arg < 0;
    } else if (strcmp(a, "--window") == 0 && more) {
      window = atoi(argv[++i]);
    } else if (strcmp(a, "--reps") == 0 && more) {
      reps_arg = atoi(argv[++i]);
    } else if (strcmp(a, "--inject-error") == 0) {
      inject = 1;
    } else {
      if (rank == 0) fprintf(stderr, "mpi_p2p: bad argument '%s'\n", a);
      usage();
    }
  }
  if (bad || window < 1 || window > 4096 || reps_arg < 1) usage();
  {
    char* copy = strdup(mode_arg);
    for (char* tok = strtok(copy, ","); tok != NULL; tok = strtok(NULL, ",")) {
      int known = 0;
      for (int m = 0; m < NMODES; ++m) {
        if (strcmp(tok, "all") != 0 && strcmp(tok, kModeNames[m]) != 0) continue;
        known = 1;
        int seen = 0;
        for (int k = 0; k < nmodes; ++k) seen |= modes[k] == m;
        if (!seen) modes[nmodes++] = m;
      }
      if (!known) {
        if (rank == 0) fprintf(stderr, "mpi_p2p: unknown --mode '%s'\n", tok);
        usage();
      }
    }
    free(copy);
    copy = strdup(sizes_arg);
    for (char* tok = strtok(copy, ","); tok != NULL; tok = strtok(NULL, ",")) {
      if (nsizes == 64 || parse_size(tok, &sizes[nsizes]) != 0 || sizes[nsizes] > 0x7fffffffULL) {
        if (rank == 0) fprintf(stderr, "mpi_p2p: bad size '%s'\n", tok);
        usage();
      }
      ++nsizes;
    }
    free(copy);
  }
  if (nmodes == 0 || nsizes == 0) usage();

  unsigned long long max_size = 0;
  for (int s = 0; s < nsizes; ++s) max_size = sizes[s] > max_size ? sizes[s] : max_size;
  sbuf = (unsigned char*)calloc(max_size, 1);
  rbuf = (unsigned char*)calloc(max_size, 1);
  reqs = (MPI_Request*)malloc(sizeof(MPI_Request) * 2 * (size_t)window);
  double* rep_us = (double*)malloc(sizeof(double) * (size_t)reps_arg);
  if (!sbuf || !rbuf || !reqs || !rep_us) {
    fprintf(stderr, "mpi_p2p: rank %d: out of memory for %llu bytes\n", rank, max_size);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  if (rank == 0) {
    printf(
        "# mpi_p2p: 2 ranks, MPI_COMM_WORLD, window %d, median of %d repetitions of the average "
        "per iteration\n",
        window, reps_arg);
    printf(
        "# time(us): latency = half a round trip; bw, bibw = a window's time / window. GB/s = 1e9 "
        "B/s (bibw: both "
        "directions)\n");
    printf("# %12s %14s %7s %7s %5s %12s %10s %7s\n", "size", "mode", "iters", "warmup", "reps",
           "time(us)", "GB/s", "#wrong");
    fflush(stdout);
  }
  long long wrong_total = 0;
  for (int mi = 0; mi < nmodes; ++mi) {
    const int mode = modes[mi];
    for (int s = 0; s < nsizes; ++s) {
      const unsigned long long size = sizes[s];
      const int n = (int)size;
      const int iters = iters_arg > 0 ? iters_arg : default_iters(mode, size, window);
      const int warmup = warmup_arg >= 0 ? warmup_arg : default_warmup(iters);
      const int reps = reps_arg < iters ? reps_arg : iters;
      fill_pattern(sbuf, size, pattern_seed(size, rank));
      if (inject && rank == 0) sbuf[size / 2] ^= 0x5a;
      MPI_Barrier(MPI_COMM_WORLD);
      for (int i = 0; i < warmup; ++i) iteration(mode, n);
      memset(rbuf, 0, size);
      for (int r = 0; r < reps; ++r) {
        const int k = iters / reps + (r < iters % reps ? 1 : 0);
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        for (int i = 0; i < k; ++i) iteration(mode, n);
        const double per_iter = (MPI_Wtime() - t0) / k;
        rep_us[r] =
            1e6 * ((mode == LATENCY || mode == LATENCY_ASYNC) ? per_iter / 2 : per_iter / window);
      }
      qsort(rep_us, (size_t)reps, sizeof(double), cmp_double);
      const double time_us =
          reps % 2 ? rep_us[reps / 2] : (rep_us[reps / 2 - 1] + rep_us[reps / 2]) / 2;
      const double gbps = (double)size * (mode == BIBW ? 2 : 1) / (time_us * 1e-6) / 1e9;

      long long mine[4] = {0, -1, 0, 0}, theirs[4] = {0, -1, 0, 0};
      if (mode != BW || rank == 1) check_pattern(rbuf, size, pattern_seed(size, peer), mine);
      if (rank == 1) {
        MPI_Send(mine, 4, MPI_LONG_LONG, 0, 200, MPI_COMM_WORLD);
        wrong_total += mine[0];
        continue;
      }
      MPI_Recv(theirs, 4, MPI_LONG_LONG, 1, 200, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      const long long wrong = mine[0] + theirs[0];
      wrong_total += wrong;
      printf("  %12llu %14s %7d %7d %5d %12.2f %10.4f %7lld\n", size, kModeNames[mode], iters,
             warmup, reps, time_us, gbps, wrong);
      if (wrong) {
        const long long* bad = mine[0] ? mine : theirs;
        printf("# #wrong: %s %llu B: rank %d, byte %lld: expected 0x%02llx, got 0x%02llx\n",
               kModeNames[mode], size, bad == mine ? 0 : 1, bad[1], bad[2], bad[3]);
      }
      fflush(stdout);
    }
  }
  if (rank == 0) {
    printf("# #wrong total: %lld %s\n", wrong_total, wrong_total == 0 ? "OK" : "FAILED");
    fflush(stdout);
  }
  free(sbuf);
  free(rbuf);
  free(reqs);
  free(rep_us);
  MPI_Finalize();
  return wrong_total == 0 ? 0 : 1;
}
