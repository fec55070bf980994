/*
 * ring.c - the classic token ring around all ranks for several rounds (each
 * rank adds its rank to the token), then the same shift with MPI_Sendrecv and
 * with MPI_Sendrecv_replace (small and large buffers), and a Sendrecv where
 * the ends of an open chain use MPI_PROC_NULL.
 */
#define PROGRAM "ring"
#include "check.h"

#define ROUNDS 5

static int rank, size;

static int right(void) { return (rank + 1) % size; }
static int left(void) { return (rank + size - 1) % size; }

/* Classic ring: rank 0 starts the token, every other rank receives it from
 * the left, adds its rank and passes it on.  Rank 0 uses MPI_Isend so that a
 * ring of one rank (sending to itself) is safe too. */
static void token_ring(void)
{
    long long token = 1000, expect = 1000;
    int round;
    const long long rank_sum = (long long)size * (size - 1) / 2;
    MPI_Status st;

    for (round = 0; round < ROUNDS; round++) {
        if (rank == 0) {
            MPI_Request req;
            long long out = token;
            CHECK_MPI(MPI_Isend(&out, 1, MPI_LONG_LONG, right(), round, MPI_COMM_WORLD, &req));
            CHECK_MPI(MPI_Recv(&token, 1, MPI_LONG_LONG, left(), round, MPI_COMM_WORLD, &st));
            CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
            expect += rank_sum;
            CHECK(token == expect, "token after round %d: expected %lld, got %lld", round,
                  expect, token);
            CHECK(st.MPI_SOURCE == left() && st.MPI_TAG == round,
                  "token status round %d: expected source %d tag %d, got source %d tag %d",
                  round, left(), round, st.MPI_SOURCE, st.MPI_TAG);
        } else {
            long long in = -1;
            /* What rank 0 sent this round plus ranks 1..rank-1. */
            long long want = 1000 + (long long)round * rank_sum + (long long)rank * (rank - 1) / 2;
            CHECK_MPI(MPI_Recv(&in, 1, MPI_LONG_LONG, left(), round, MPI_COMM_WORLD, &st));
            CHECK(in == want, "token at rank %d round %d: expected %lld, got %lld", rank, round,
                  want, in);
            CHECK(st.MPI_SOURCE == left() && st.MPI_TAG == round,
                  "token status round %d: expected source %d tag %d, got source %d tag %d",
                  round, left(), round, st.MPI_SOURCE, st.MPI_TAG);
            in += rank;
            CHECK_MPI(MPI_Send(&in, 1, MPI_LONG_LONG, right(), round, MPI_COMM_WORLD));
        }
    }
    /* Everyone learns the final token. */
    CHECK_MPI(MPI_Bcast(&token, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD));
    CHECK(token == 1000 + ROUNDS * rank_sum, "final token: expected %lld, got %lld",
          1000 + ROUNDS * rank_sum, token);
}

/* Shift values to the right `size` times with MPI_Sendrecv: after k shifts a
 * rank holds the value that started at rank - k. */
static void sendrecv_ring(void)
{
    int k, value = rank * 10 + 7;
    for (k = 1; k <= size * 2; k++) {
        int in = -1, count = -1;
        MPI_Status st;
        int origin = ((rank - k) % size + size) % size;
        CHECK_MPI(MPI_Sendrecv(&value, 1, MPI_INT, right(), 40 + k, &in, 1, MPI_INT, left(),
                               40 + k, MPI_COMM_WORLD, &st));
        CHECK(in == origin * 10 + 7, "Sendrecv shift %d: expected %d, got %d", k,
              origin * 10 + 7, in);
        CHECK(st.MPI_SOURCE == left() && st.MPI_TAG == 40 + k,
              "Sendrecv status: expected source %d tag %d, got %d %d", left(), 40 + k,
              st.MPI_SOURCE, st.MPI_TAG);
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == 1, "Sendrecv count: expected 1, got %d", count);
        value = in;
    }
    CHECK(value == rank * 10 + 7, "Sendrecv full circles: expected %d, got %d",
          rank * 10 + 7, value);

    /* Token accumulation with Sendrecv: each rank adds its rank and passes
     * on; after `size` steps everyone holds the sum of all ranks plus its
     * own start value. */
    {
        long long acc = 0;
        for (k = 0; k < size; k++) {
            long long in = -1;
            acc += rank;
            CHECK_MPI(MPI_Sendrecv(&acc, 1, MPI_LONG_LONG, right(), 60, &in, 1, MPI_LONG_LONG,
                                   left(), 60, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            acc = in;
        }
        CHECK(acc == (long long)size * (size - 1) / 2,
              "Sendrecv accumulation: expected %lld, got %lld",
              (long long)size * (size - 1) / 2, acc);
    }
}

/* MPI_Sendrecv_replace shifts a whole buffer; n = 1, 1000 and 300000 ints
 * (the last is well beyond any eager limit). */
static void sendrecv_replace_ring(void)
{
    static const int sizes[] = {1, 1000, 300000};
    size_t s;
    for (s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s], k, i;
        int *buf = malloc((size_t)n * sizeof *buf);
        CHECK(buf != NULL, "malloc of %d ints", n);
        for (i = 0; i < n; i++)
            buf[i] = rank * 1000003 + i;
        for (k = 1; k <= size; k++) {
            MPI_Status st;
            int origin = ((rank - k) % size + size) % size, count = -1;
            CHECK_MPI(MPI_Sendrecv_replace(buf, n, MPI_INT, right(), 80 + k, left(), 80 + k,
                                           MPI_COMM_WORLD, &st));
            CHECK(st.MPI_SOURCE == left() && st.MPI_TAG == 80 + k,
                  "Sendrecv_replace status: expected source %d tag %d, got %d %d", left(),
                  80 + k, st.MPI_SOURCE, st.MPI_TAG);
            CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
            CHECK(count == n, "Sendrecv_replace count: expected %d, got %d", n, count);
            for (i = 0; i < n; i++)
                CHECK(buf[i] == origin * 1000003 + i,
                      "Sendrecv_replace n=%d shift %d elem %d: expected %d, got %d", n, k, i,
                      origin * 1000003 + i, buf[i]);
        }
        free(buf);
    }

    /* Token accumulation with Sendrecv_replace. */
    {
        long long acc = 0;
        int k;
        for (k = 0; k < size; k++) {
            acc += rank;
            CHECK_MPI(MPI_Sendrecv_replace(&acc, 1, MPI_LONG_LONG, right(), 99, left(), 99,
                                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        }
        CHECK(acc == (long long)size * (size - 1) / 2,
              "Sendrecv_replace accumulation: expected %lld, got %lld",
              (long long)size * (size - 1) / 2, acc);
    }
}

/* An open chain: rank 0 has no left neighbour and the last rank no right one
 * (MPI_PROC_NULL). Values move one step to the right. */
static void chain_proc_null(void)
{
    int l = rank == 0 ? MPI_PROC_NULL : rank - 1;
    int r = rank == size - 1 ? MPI_PROC_NULL : rank + 1;
    int out = 500 + rank, in = -12345, count = -1;
    MPI_Status st;
    CHECK_MPI(MPI_Sendrecv(&out, 1, MPI_INT, r, 7, &in, 1, MPI_INT, l, 7, MPI_COMM_WORLD, &st));
    CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
    if (rank == 0) {
        CHECK(in == -12345, "Sendrecv from MPI_PROC_NULL changed the buffer: got %d", in);
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG && count == 0,
              "Sendrecv from MPI_PROC_NULL: expected source MPI_PROC_NULL tag MPI_ANY_TAG "
              "count 0, got source %d tag %d count %d",
              st.MPI_SOURCE, st.MPI_TAG, count);
    } else {
        CHECK(in == 500 + rank - 1, "chain: expected %d, got %d", 500 + rank - 1, in);
        CHECK(st.MPI_SOURCE == rank - 1 && count == 1,
              "chain status: expected source %d count 1, got %d %d", rank - 1, st.MPI_SOURCE,
              count);
    }
}

int main(int argc, char **argv)
{
    CHECK_MPI(MPI_Init(&argc, &argv));
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));

    token_ring();
    sendrecv_ring();
    sendrecv_replace_ring();
    chain_proc_null();

    return check_finish();
}
