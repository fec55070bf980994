/*
 * bench/coll/ompi_coll.c: latency of MPI collectives, the same measurement
 * as BCL's bcl-coll (tools/src/bin/bcl-coll.rs), for bench/coll-compare.sh.
 *
 * For each operation of --ops and each size of --sizes (bytes; the barrier
 * ignores sizes), every rank runs --warmup untimed iterations, then --iters
 * timed ones back to back, timing each iteration itself (CLOCK_MONOTONIC).
 * After the timed loop the per-iteration times go to rank 0 with
 * MPI_Reduce(MPI_MAX), so rank 0 holds, per iteration, the slowest rank's
 * time; it prints one JSON line per (operation, size) with the median and
 * the 99th percentile (nearest rank) of those maxima, in bcl-coll's shape
 * with "tool":"ompi":
 *
 *   {"tool":"ompi","op":"allreduce","size":65536,"ranks":4,"nodes":1,
 *    "iters":1000,"warmup":100,"p50_us":12.34,"p99_us":45.67,
 *    "algorithm":"default","deterministic":false,"mode":"busy-poll",
 *    "sync":false}
 *
 *   barrier:   MPI_Barrier (reported with size 0)
 *   allreduce: MPI_Allreduce(MPI_IN_PLACE, size/8 MPI_DOUBLE, MPI_SUM); the
 *              buffer is refilled with the rank's input before each
 *              iteration, outside the timed window (as bcl-coll does)
 *   bcast:     MPI_Bcast(size MPI_BYTE, root 0)
 *
 * Each (operation, size) is checked once before its warm-up, with the same
 * inputs as bcl-coll (allreduce of small integers against their closed-form
 * sum, exact in double; bcast against a byte pattern); a wrong result on any
 * rank makes every rank exit with status 1.
 *
 * With --sync, an untimed MPI_Barrier precedes every iteration (warm-up
 * and timed), as in bcl-coll --sync.
 *
 * Iterations default to 1000 up to 64 KiB and 20 above; warm-up to 100 and
 * 3. "algorithm" is "default" (coll/tuned's own decision, not reported by
 * Open MPI); "deterministic" is false (MPI does not promise bitwise
 * reproducible reductions across algorithms); --mode LABEL only sets the
 * "mode" field (Open MPI yields when idle by itself once oversubscribed).
 *
 *   mpicc -O2 -o ompi_coll bench/coll/ompi_coll.c
 *   mpirun -np 4 --oversubscribe --bind-to none --mca pml ob1 \
 *       --mca btl self,vader ./ompi_coll --ops barrier,allreduce,bcast \
 *       --sizes 8,65536,4194304
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SMALL (64 * 1024)
#define MAX_LIST 64

enum op { BARRIER, ALLREDUCE, BCAST };
static const char *op_names[] = {"barrier", "allreduce", "bcast"};

static int rank, nranks;

static void die(const char *msg) {
    if (rank == 0)
        fprintf(stderr, "ompi_coll: %s\n", msg);
    MPI_Finalize();
    exit(2);
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Same inputs as bcl-coll. */
static double input_value(long r, long i) { return (double)((r + 1) * (i % 1021 + 1)); }
static double expected_sum(long p, long i) { return (double)(p * (p + 1) / 2 * (i % 1021 + 1)); }
static unsigned char pattern(long size, long i) { return (unsigned char)((i * 7 + size) % 251); }

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The pct-th percentile (nearest rank: the ceil(pct * n / 100)-th
 * smallest) of sorted v. */
static uint64_t percentile(const uint64_t *v, long n, long pct) {
    long idx = (pct * n + 99) / 100;
    if (idx < 1)
        idx = 1;
    if (idx > n)
        idx = n;
    return v[idx - 1];
}

static long parse_size(const char *s) {
    char *end;
    long n = strtol(s, &end, 10);
    if (end == s)
        return -1;
    switch (*end) {
    case 'k': case 'K': n <<= 10; end++; break;
    case 'm': case 'M': n <<= 20; end++; break;
    case 'g': case 'G': n <<= 30; end++; break;
    }
    return *end == '\0' && n > 0 ? n : -1;
}

/* Checks one result; returns 0 when right (message in err otherwise). */
static int check_once(enum op op, long size, char *err, size_t errlen) {
    long i, n;
    if (op == BARRIER) {
        MPI_Barrier(MPI_COMM_WORLD);
        return 0;
    }
    if (op == ALLREDUCE) {
        n = size / 8;
        double *v = malloc((size_t)n * sizeof *v);
        for (i = 0; i < n; i++)
            v[i] = input_value(rank, i);
        MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        for (i = 0; i < n; i++) {
            if (v[i] != expected_sum(nranks, i)) {
                snprintf(err, errlen, "allreduce of %ld bytes on %d ranks: element %ld is %g, expected %g",
                         size, nranks, i, v[i], expected_sum(nranks, i));
                free(v);
                return 1;
            }
        }
        free(v);
        return 0;
    }
    unsigned char *b = malloc((size_t)size);
    for (i = 0; i < size; i++)
        b[i] = rank == 0 ? pattern(size, i) : 0;
    MPI_Bcast(b, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD);
    for (i = 0; i < size; i++) {
        if (b[i] != pattern(size, i)) {
            snprintf(err, errlen, "bcast of %ld bytes from rank 0: byte %ld is %u, expected %u", size, i,
                     b[i], pattern(size, i));
            free(b);
            return 1;
        }
    }
    free(b);
    return 0;
}

/* Runs warmup + iters iterations; this rank's time of each timed one. */
static void time_op(enum op op, long size, long warmup, long iters, int sync, uint64_t *times) {
    long i, k, n = size / 8;
    double *in = NULL, *v = NULL;
    unsigned char *b = NULL;
    if (op == ALLREDUCE) {
        in = malloc((size_t)n * sizeof *in);
        v = malloc((size_t)n * sizeof *v);
        for (k = 0; k < n; k++)
            in[k] = input_value(rank, k);
    } else if (op == BCAST) {
        b = malloc((size_t)size);
        for (k = 0; k < size; k++)
            b[k] = pattern(size, k);
    }
    for (i = 0; i < warmup + iters; i++) {
        uint64_t t;
        if (op == ALLREDUCE)
            memcpy(v, in, (size_t)n * sizeof *v);
        if (sync)
            MPI_Barrier(MPI_COMM_WORLD);
        t = now_ns();
        switch (op) {
        case BARRIER: MPI_Barrier(MPI_COMM_WORLD); break;
        case ALLREDUCE: MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
        case BCAST: MPI_Bcast(b, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD); break;
        }
        t = now_ns() - t;
        if (i >= warmup)
            times[i - warmup] = t;
    }
    free(in);
    free(v);
    free(b);
}

int main(int argc, char **argv) {
    enum op ops[MAX_LIST] = {BARRIER, ALLREDUCE, BCAST};
    int nops = 3, nsizes = 3, a, o, s;
    long sizes[MAX_LIST] = {8, 65536, 4194304};
    long iters_flag = -1, warmup_flag = -1;
    const char *mode = "busy-poll";
    int sync = 0;
    MPI_Comm node;
    int node_rank, leaders, mine;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    for (a = 1; a < argc; a++) {
        const char *val = a + 1 < argc ? argv[a + 1] : NULL;
        if (!strcmp(argv[a], "-h") || !strcmp(argv[a], "--help")) {
            if (rank == 0)
                printf("usage: ompi_coll [--ops barrier,allreduce,bcast] [--sizes 8,64K,4M] [--iters N] "
                       "[--warmup N] [--sync] [--mode LABEL]\n");
            MPI_Finalize();
            return 0;
        }
        if (!strcmp(argv[a], "--sync")) {
            sync = 1;
            continue;
        }
        if (!val)
            die("every option takes a value (see --help)");
        if (!strcmp(argv[a], "--ops") || !strcmp(argv[a], "--sizes")) {
            char *copy = strdup(val), *tok, *save = NULL;
            int is_ops = !strcmp(argv[a], "--ops"), count = 0;
            for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (count == MAX_LIST)
                    die("too many list entries");
                if (is_ops) {
                    int k, found = -1;
                    for (k = 0; k < 3; k++)
                        if (!strcmp(tok, op_names[k]))
                            found = k;
                    if (found < 0)
                        die("--ops takes barrier, allreduce and bcast");
                    ops[count++] = (enum op)found;
                } else {
                    long sz = parse_size(tok);
                    if (sz < 0)
                        die("--sizes takes sizes such as 8,64K,4M");
                    sizes[count++] = sz;
                }
            }
            free(copy);
            if (count == 0)
                die("empty list");
            if (is_ops)
                nops = count;
            else
                nsizes = count;
        } else if (!strcmp(argv[a], "--iters")) {
            iters_flag = atol(val);
            if (iters_flag < 1)
                die("--iters must be at least 1");
        } else if (!strcmp(argv[a], "--warmup")) {
            warmup_flag = atol(val);
            if (warmup_flag < 0)
                die("--warmup must be at least 0");
        } else if (!strcmp(argv[a], "--mode")) {
            mode = val;
        } else {
            die("unknown option (see --help)");
        }
        a++;
    }
    for (o = 0; o < nops; o++)
        if (ops[o] == ALLREDUCE)
            for (s = 0; s < nsizes; s++)
                if (sizes[s] % 8)
                    die("allreduce sums doubles: every size must be a multiple of 8 bytes");

    /* Nodes: the number of shared-memory domains. */
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &node_rank);
    mine = node_rank == 0;
    MPI_Allreduce(&mine, &leaders, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_free(&node);

    for (o = 0; o < nops; o++) {
        enum op op = ops[o];
        int nsz = op == BARRIER ? 1 : nsizes;
        for (s = 0; s < nsz; s++) {
            long size = op == BARRIER ? 0 : sizes[s];
            int small = size <= SMALL;
            long iters = iters_flag > 0 ? iters_flag : (small ? 1000 : 20);
            long warmup = warmup_flag >= 0 ? warmup_flag : (small ? 100 : 3);
            char err[256] = "";
            int bad = check_once(op, size, err, sizeof err), nbad = 0;
            if (bad)
                fprintf(stderr, "ompi_coll: rank %d: wrong result: %s\n", rank, err);
            MPI_Allreduce(&bad, &nbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            if (nbad) {
                if (rank == 0)
                    fprintf(stderr, "ompi_coll: %s of %ld bytes gave a wrong result on %d rank(s)\n",
                            op_names[op], size, nbad);
                MPI_Finalize();
                return 1;
            }
            uint64_t *times = malloc((size_t)iters * sizeof *times);
            uint64_t *maxes = malloc((size_t)iters * sizeof *maxes);
            time_op(op, size, warmup, iters, sync, times);
            /* The slowest rank's time per iteration, at rank 0. */
            MPI_Reduce(times, maxes, (int)iters, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
            if (rank == 0) {
                qsort(maxes, (size_t)iters, sizeof *maxes, cmp_u64);
                printf("{\"tool\":\"ompi\",\"op\":\"%s\",\"size\":%ld,\"ranks\":%d,\"nodes\":%d,"
                       "\"iters\":%ld,\"warmup\":%ld,\"p50_us\":%.2f,\"p99_us\":%.2f,"
                       "\"algorithm\":\"default\",\"deterministic\":false,\"mode\":\"%s\",\"sync\":%s}\n",
                       op_names[op], size, nranks, leaders, iters, warmup,
                       (double)percentile(maxes, iters, 50) / 1000.0,
                       (double)percentile(maxes, iters, 99) / 1000.0, mode,
                       sync ? "true" : "false");
                fflush(stdout);
            }
            free(times);
            free(maxes);
        }
    }
    MPI_Finalize();
    return 0;
}
