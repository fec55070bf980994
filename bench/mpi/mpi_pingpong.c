/*
 * bench/mpi/mpi_pingpong.c: MPI point-to-point latency and bandwidth
 * between the two ranks of a job, the same program for every MPI (built with bclcc
 * for BCL, with mpicc for Open MPI or MPICH).
 *
 * Latency: a ping-pong of SIZE bytes (MPI_Send/MPI_Recv), --warmup
 * untimed round trips then --iters timed ones, each timed alone; prints
 * the median and 99th percentile of the one-way time (half the round
 * trip), in microseconds.
 *
 * Bandwidth: windows of --window MPI_Isend of SIZE bytes from rank 0,
 * matched by pre-posted MPI_Irecv at rank 1, then a 4-byte reply; the
 * rate is bytes over time for --iters windows after --warmup ones, in
 * MB/s (10^6 bytes per second).
 *
 * Every received message is checked (its first and last byte carry the
 * iteration number). One JSON line per (test, size) from rank 0:
 *   {"test":"latency","size":8,"iters":N,"p50_us":X,"p99_us":Y}
 *   {"test":"bandwidth","size":65536,"iters":N,"window":W,"mb_s":X}
 *
 * Usage: mpi_pingpong [--test latency|bandwidth|both] [--sizes 8,65536]
 *                     [--iters N] [--warmup N] [--window W]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fail(const char *what)
{
    fprintf(stderr, "mpi_pingpong: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static void check(const unsigned char *buf, long size, int iter)
{
    unsigned char want = (unsigned char)iter;
    if (size > 0 && (buf[0] != want || buf[size - 1] != want))
        fail("received data does not match what was sent");
}

static void stamp(unsigned char *buf, long size, int iter)
{
    if (size > 0) {
        buf[0] = (unsigned char)iter;
        buf[size - 1] = (unsigned char)iter;
    }
}

static void latency(int rank, long size, int iters, int warmup, unsigned char *buf)
{
    double *t = malloc(sizeof(double) * (size_t)iters);
    if (!t)
        fail("out of memory");
    for (int i = -warmup; i < iters; i++) {
        double t0 = MPI_Wtime();
        if (rank == 0) {
            stamp(buf, size, i);
            MPI_Send(buf, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            check(buf, size, i);
        } else {
            MPI_Recv(buf, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            check(buf, size, i);
            MPI_Send(buf, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
        if (i >= 0)
            t[i] = (MPI_Wtime() - t0) / 2 * 1e6;
    }
    if (rank == 0) {
        qsort(t, (size_t)iters, sizeof(double), cmp_double);
        printf("{\"test\":\"latency\",\"size\":%ld,\"iters\":%d,\"p50_us\":%.3f,\"p99_us\":%.3f}\n",
               size, iters, t[iters / 2], t[(int)((iters - 1) * 0.99)]);
        fflush(stdout);
    }
    free(t);
}

static void bandwidth(int rank, long size, int iters, int warmup, int window, unsigned char *bufs)
{
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)window);
    int ack = 0;
    double t0 = 0;
    if (!req)
        fail("out of memory");
    for (int i = -warmup; i < iters; i++) {
        if (i == 0) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        for (int w = 0; w < window; w++) {
            unsigned char *b = bufs + (size_t)w * (size_t)size;
            if (rank == 0) {
                stamp(b, size, i);
                MPI_Isend(b, (int)size, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req[w]);
            } else {
                MPI_Irecv(b, (int)size, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &req[w]);
            }
        }
        MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
        if (rank == 0) {
            MPI_Recv(&ack, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            for (int w = 0; w < window; w++)
                check(bufs + (size_t)w * (size_t)size, size, i);
            MPI_Send(&ack, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
        }
    }
    double secs = MPI_Wtime() - t0;
    if (rank == 0) {
        printf("{\"test\":\"bandwidth\",\"size\":%ld,\"iters\":%d,\"window\":%d,\"mb_s\":%.1f}\n",
               size, iters, window, (double)size * window * iters / secs / 1e6);
        fflush(stdout);
    }
    free(req);
}

int main(int argc, char **argv)
{
    const char *test = "both";
    char sizes[256] = "8,65536,4194304";
    int iters = 1000, warmup = 100, window = 16, rank, nranks;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--test") && i + 1 < argc)
            test = argv[++i];
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
            snprintf(sizes, sizeof sizes, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--window") && i + 1 < argc)
            window = atoi(argv[++i]);
        else {
            if (rank == 0)
                fprintf(stderr,
                        "usage: mpi_pingpong [--test latency|bandwidth|both] [--sizes 8,65536] "
                        "[--iters N] [--warmup N] [--window W]\n");
            MPI_Finalize();
            return 2;
        }
    }
    if (nranks != 2 || iters < 1 || warmup < 0 || window < 1) {
        if (rank == 0)
            fprintf(stderr, "mpi_pingpong: needs exactly 2 ranks, --iters >= 1, --window >= 1\n");
        MPI_Finalize();
        return 2;
    }
    for (char *s = strtok(sizes, ","); s; s = strtok(NULL, ",")) {
        long size = atol(s);
        int lat = strcmp(test, "bandwidth") != 0, bw = strcmp(test, "latency") != 0;
        unsigned char *buf = malloc((size_t)(size > 0 ? size : 1) * (size_t)window);
        if (!buf)
            fail("out of memory");
        memset(buf, 0, (size_t)(size > 0 ? size : 1) * (size_t)window);
        /* Fewer iterations for large messages: about the same time per size. */
        if (lat) {
            int it = size >= (1 << 20) ? (iters / 20 > 5 ? iters / 20 : 5) : iters;
            int wu = size >= (1 << 20) ? (warmup / 20 > 2 ? warmup / 20 : 2) : warmup;
            latency(rank, size, it, wu, buf);
        }
        if (bw) {
            int it = size >= (1 << 20) ? (iters / 50 > 3 ? iters / 50 : 3) : iters / 10 + 1;
            bandwidth(rank, size, it, 2, window, buf);
        }
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
