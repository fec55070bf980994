/*
 * types.c - derived datatypes and user-defined reduction operations.
 *
 * Covered: MPI_Type_size / MPI_Type_get_extent of basic types, of
 * MPI_Type_contiguous and MPI_Type_vector types (positive and negative
 * stride, vector of a derived type); sends and receives of vector types
 * against contiguous buffers and vice versa (MPI_Get_count and
 * MPI_Get_elements, including MPI_UNDEFINED for a partial element); an
 * MPI_Bcast of a matrix column (vector type) from every root; an
 * MPI_Allgather of a contiguous type; MPI_Type_free (also of a type still used
 * by another derived type); MPI_Op_create with a commutative op (elementwise
 * max of absolute values) and a non-commutative one (2x2 matrix product on a
 * contiguous type of 4 doubles: the result must be M_0 * M_1 * ... * M_{n-1}
 * in rank order) in MPI_Reduce (every root), MPI_Allreduce (also in place),
 * MPI_Scan and MPI_Exscan; MPI_Op_free.  It also starts with MPI_Init_thread
 * and checks MPI_Query_thread and MPI_Is_thread_main.
 */
#define PROGRAM "types"
#include "check.h"

#include <string.h>

static int rank, size;

static int right(void) { return (rank + 1) % size; }
static int left(void) { return (rank + size - 1) % size; }

static void check_size_extent(MPI_Datatype t, const char *name, int want_size, MPI_Aint want_lb,
                              MPI_Aint want_extent)
{
    int sz = -1;
    MPI_Aint lb = -12345, extent = -12345;
    CHECK_MPI(MPI_Type_size(t, &sz));
    CHECK(sz == want_size, "MPI_Type_size(%s): expected %d, got %d", name, want_size, sz);
    CHECK_MPI(MPI_Type_get_extent(t, &lb, &extent));
    CHECK(lb == want_lb && extent == want_extent,
          "MPI_Type_get_extent(%s): expected lb %ld extent %ld, got lb %ld extent %ld", name,
          (long)want_lb, (long)want_extent, (long)lb, (long)extent);
}

/* ------------------------------------------------------------ threads */

static void check_thread(int provided)
{
    int q = -1, main_thread = 0;
    CHECK(MPI_THREAD_SINGLE < MPI_THREAD_FUNNELED && MPI_THREAD_FUNNELED < MPI_THREAD_SERIALIZED &&
              MPI_THREAD_SERIALIZED < MPI_THREAD_MULTIPLE,
          "thread level constants are not ordered: %d %d %d %d", MPI_THREAD_SINGLE,
          MPI_THREAD_FUNNELED, MPI_THREAD_SERIALIZED, MPI_THREAD_MULTIPLE);
    CHECK(provided == MPI_THREAD_SINGLE || provided == MPI_THREAD_FUNNELED ||
              provided == MPI_THREAD_SERIALIZED || provided == MPI_THREAD_MULTIPLE,
          "MPI_Init_thread provided: expected a thread level, got %d", provided);
    CHECK_MPI(MPI_Query_thread(&q));
    CHECK(q == provided, "MPI_Query_thread: expected %d (provided), got %d", provided, q);
    CHECK_MPI(MPI_Is_thread_main(&main_thread));
    CHECK(main_thread, "MPI_Is_thread_main: expected true in the thread that called MPI_Init_thread");
}

/* -------------------------------------------------- sizes and extents */

static void test_sizes(void)
{
    MPI_Datatype quad, vec, negvec, pair, vpair;

    check_size_extent(MPI_CHAR, "MPI_CHAR", 1, 0, 1);
    check_size_extent(MPI_BYTE, "MPI_BYTE", 1, 0, 1);
    check_size_extent(MPI_SHORT, "MPI_SHORT", 2, 0, 2);
    check_size_extent(MPI_INT, "MPI_INT", 4, 0, 4);
    check_size_extent(MPI_LONG_LONG, "MPI_LONG_LONG", 8, 0, 8);
    check_size_extent(MPI_FLOAT, "MPI_FLOAT", 4, 0, 4);
    check_size_extent(MPI_DOUBLE, "MPI_DOUBLE", 8, 0, 8);
    check_size_extent(MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR", 1, 0, 1);
    check_size_extent(MPI_2INT, "MPI_2INT", 8, 0, 8);
    /* struct { double; int; }: 12 bytes of data, extent padded to 16. */
    check_size_extent(MPI_DOUBLE_INT, "MPI_DOUBLE_INT", 12, 0, 16);

    CHECK_MPI(MPI_Type_contiguous(4, MPI_DOUBLE, &quad));
    CHECK_MPI(MPI_Type_commit(&quad));
    check_size_extent(quad, "contiguous(4, MPI_DOUBLE)", 32, 0, 32);

    /* 5 blocks of 3 ints, stride 7 ints: extent (4 * 7 + 3) * 4 = 124. */
    CHECK_MPI(MPI_Type_vector(5, 3, 7, MPI_INT, &vec));
    CHECK_MPI(MPI_Type_commit(&vec));
    check_size_extent(vec, "vector(5, 3, 7, MPI_INT)", 60, 0, 124);

    /* Negative stride: blocks at 0, -8, -16 bytes: lb -16, extent 20. */
    CHECK_MPI(MPI_Type_vector(3, 1, -2, MPI_INT, &negvec));
    CHECK_MPI(MPI_Type_commit(&negvec));
    check_size_extent(negvec, "vector(3, 1, -2, MPI_INT)", 12, -16, 20);

    /* A vector of a derived type: pair = 2 shorts (4 bytes); 3 blocks of 2
     * pairs with stride 4 pairs: extent (2 * 4 + 2) * 4 = 40, size 24. */
    CHECK_MPI(MPI_Type_contiguous(2, MPI_SHORT, &pair));
    CHECK_MPI(MPI_Type_vector(3, 2, 4, pair, &vpair));
    CHECK_MPI(MPI_Type_commit(&vpair));
    check_size_extent(vpair, "vector(3, 2, 4, contiguous(2, MPI_SHORT))", 24, 0, 40);
    /* Size and extent may be asked of an uncommitted type. */
    check_size_extent(pair, "contiguous(2, MPI_SHORT)", 4, 0, 4);

    CHECK_MPI(MPI_Type_free(&quad));
    CHECK(quad == MPI_DATATYPE_NULL, "MPI_Type_free did not set the handle to MPI_DATATYPE_NULL");
    CHECK_MPI(MPI_Type_free(&vec));
    CHECK_MPI(MPI_Type_free(&negvec));
    CHECK_MPI(MPI_Type_free(&pair));
    CHECK_MPI(MPI_Type_free(&vpair));
    CHECK(vec == MPI_DATATYPE_NULL && negvec == MPI_DATATYPE_NULL && pair == MPI_DATATYPE_NULL &&
              vpair == MPI_DATATYPE_NULL,
          "MPI_Type_free did not set the handles to MPI_DATATYPE_NULL");
}

/* --------------------------------------------- point-to-point with types */

#define VN 62 /* two vector elements: 2 * 31 ints */

static int vec_index(int k)
{
    /* k-th int (0..29) described by two elements of vector(5, 3, 7): element
     * e = k / 15 starts at e * 31; within it block b = (k % 15) / 3 at b * 7. */
    int e = k / 15, w = k % 15;
    return e * 31 + (w / 3) * 7 + w % 3;
}

static void test_p2p(void)
{
    MPI_Datatype vec, negvec, vpair, pair;
    int src[VN], dst[VN], flat[30], i, count, elements;
    MPI_Status st;
    MPI_Request req;

    CHECK_MPI(MPI_Type_vector(5, 3, 7, MPI_INT, &vec));
    CHECK_MPI(MPI_Type_commit(&vec));

    /* Send 2 vector elements, receive 30 contiguous ints. */
    for (i = 0; i < VN; i++)
        src[i] = rank * 1000 + i;
    CHECK_MPI(MPI_Isend(src, 2, vec, right(), 1, MPI_COMM_WORLD, &req));
    memset(flat, 0xff, sizeof flat);
    CHECK_MPI(MPI_Recv(flat, 30, MPI_INT, left(), 1, MPI_COMM_WORLD, &st));
    CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
    CHECK(count == 30, "vector -> ints: Get_count expected 30, got %d", count);
    for (i = 0; i < 30; i++)
        CHECK(flat[i] == left() * 1000 + vec_index(i), "vector -> ints elem %d: expected %d, got %d",
              i, left() * 1000 + vec_index(i), flat[i]);

    /* Send 30 contiguous ints, receive 2 vector elements: the gaps stay
     * untouched. */
    for (i = 0; i < 30; i++)
        flat[i] = rank * 100 + i;
    for (i = 0; i < VN; i++)
        dst[i] = -1;
    CHECK_MPI(MPI_Isend(flat, 30, MPI_INT, right(), 2, MPI_COMM_WORLD, &req));
    CHECK_MPI(MPI_Recv(dst, 2, vec, left(), 2, MPI_COMM_WORLD, &st));
    CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Get_count(&st, vec, &count));
    CHECK_MPI(MPI_Get_elements(&st, vec, &elements));
    CHECK(count == 2 && elements == 30,
          "ints -> vector: Get_count expected 2 and Get_elements 30, got %d and %d", count, elements);
    {
        int expect[VN];
        for (i = 0; i < VN; i++)
            expect[i] = -1;
        for (i = 0; i < 30; i++)
            expect[vec_index(i)] = left() * 100 + i;
        for (i = 0; i < VN; i++)
            CHECK(dst[i] == expect[i], "ints -> vector: int %d expected %d, got %d", i, expect[i],
                  dst[i]);
    }

    /* Only 20 ints for 2 vector elements: Get_count is MPI_UNDEFINED,
     * Get_elements 20. */
    for (i = 0; i < VN; i++)
        dst[i] = -1;
    CHECK_MPI(MPI_Isend(flat, 20, MPI_INT, right(), 3, MPI_COMM_WORLD, &req));
    CHECK_MPI(MPI_Recv(dst, 2, vec, left(), 3, MPI_COMM_WORLD, &st));
    CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Get_count(&st, vec, &count));
    CHECK_MPI(MPI_Get_elements(&st, vec, &elements));
    CHECK(count == MPI_UNDEFINED && elements == 20,
          "20 ints -> vector: Get_count expected MPI_UNDEFINED and Get_elements 20, got %d and %d",
          count, elements);
    for (i = 0; i < 20; i++)
        CHECK(dst[vec_index(i)] == left() * 100 + i, "20 ints -> vector: int %d expected %d, got %d",
              i, left() * 100 + i, dst[vec_index(i)]);
    CHECK(dst[vec_index(20)] == -1, "20 ints -> vector wrote past the message");

    /* Vector to vector with Sendrecv. */
    for (i = 0; i < VN; i++)
        dst[i] = -1;
    CHECK_MPI(MPI_Sendrecv(src, 2, vec, right(), 4, dst, 2, vec, left(), 4, MPI_COMM_WORLD, &st));
    for (i = 0; i < 30; i++)
        CHECK(dst[vec_index(i)] == left() * 1000 + vec_index(i),
              "vector -> vector int %d: expected %d, got %d", i, left() * 1000 + vec_index(i),
              dst[vec_index(i)]);

    /* Negative stride: elements taken at base, base - 2, base - 4 ints. */
    CHECK_MPI(MPI_Type_vector(3, 1, -2, MPI_INT, &negvec));
    CHECK_MPI(MPI_Type_commit(&negvec));
    {
        int in3[3] = {-1, -1, -1};
        CHECK_MPI(MPI_Sendrecv(&src[10], 1, negvec, right(), 5, in3, 3, MPI_INT, left(), 5,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (i = 0; i < 3; i++)
            CHECK(in3[i] == left() * 1000 + 10 - 2 * i,
                  "negative-stride vector elem %d: expected %d, got %d", i,
                  left() * 1000 + 10 - 2 * i, in3[i]);
    }

    /* A vector of pairs of shorts; the inner type is freed before use (the
     * outer type must keep working). */
    CHECK_MPI(MPI_Type_contiguous(2, MPI_SHORT, &pair));
    CHECK_MPI(MPI_Type_vector(3, 2, 4, pair, &vpair));
    CHECK_MPI(MPI_Type_commit(&vpair));
    CHECK_MPI(MPI_Type_free(&pair));
    {
        short s_out[20], s_in[12];
        for (i = 0; i < 20; i++)
            s_out[i] = (short)(rank * 50 + i);
        CHECK_MPI(MPI_Sendrecv(s_out, 1, vpair, right(), 6, s_in, 12, MPI_SHORT, left(), 6,
                               MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Get_count(&st, MPI_SHORT, &count));
        CHECK(count == 12, "vector of pairs: Get_count expected 12 shorts, got %d", count);
        for (i = 0; i < 12; i++) {
            /* block b = i / 4 starts at short 8 * b. */
            int want = left() * 50 + 8 * (i / 4) + i % 4;
            CHECK(s_in[i] == want, "vector of pairs short %d: expected %d, got %d", i, want,
                  s_in[i]);
        }
    }

    /* A pair type counts its two parts as basic elements: 3 MPI_DOUBLE_INT
     * are 3 by Get_count and 6 by Get_elements, as MPICH counts them (Open
     * MPI counts a pair as one element). */
    {
#ifdef OPEN_MPI
        const int pair_parts = 1;
#else
        const int pair_parts = 2;
#endif
        struct {
            double d;
            int i;
        } p_out[3], p_in[3];
        for (i = 0; i < 3; i++) {
            p_out[i].d = rank + i * 0.5;
            p_out[i].i = rank * 10 + i;
        }
        CHECK_MPI(MPI_Sendrecv(p_out, 3, MPI_DOUBLE_INT, right(), 7, p_in, 3, MPI_DOUBLE_INT,
                               left(), 7, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Get_count(&st, MPI_DOUBLE_INT, &count));
        CHECK_MPI(MPI_Get_elements(&st, MPI_DOUBLE_INT, &elements));
        CHECK(count == 3 && elements == 3 * pair_parts,
              "3 MPI_DOUBLE_INT: Get_count expected 3 and Get_elements %d, got %d and %d",
              3 * pair_parts, count, elements);
        for (i = 0; i < 3; i++)
            CHECK(p_in[i].d == left() + i * 0.5 && p_in[i].i == left() * 10 + i,
                  "MPI_DOUBLE_INT pair %d: got (%g, %d)", i, p_in[i].d, p_in[i].i);
    }

    CHECK_MPI(MPI_Type_free(&vec));
    CHECK_MPI(MPI_Type_free(&negvec));
    CHECK_MPI(MPI_Type_free(&vpair));
}

/* --------------------------------------------------- collectives + types */

#define NM 10

static void test_coll(void)
{
    MPI_Datatype column, quad;
    double m[NM][NM];
    int root, i, j;

    /* Column j = root of a 10x10 matrix, broadcast from every root. */
    CHECK_MPI(MPI_Type_vector(NM, 1, NM, MPI_DOUBLE, &column));
    CHECK_MPI(MPI_Type_commit(&column));
    for (root = 0; root < size; root++) {
        int col = root % NM;
        for (i = 0; i < NM; i++)
            for (j = 0; j < NM; j++)
                m[i][j] = rank == root ? 1000.0 * root + 10 * i + j : -1.0;
        CHECK_MPI(MPI_Bcast(&m[0][col], 1, column, root, MPI_COMM_WORLD));
        for (i = 0; i < NM; i++)
            for (j = 0; j < NM; j++) {
                double want = (j == col || rank == root) ? 1000.0 * root + 10 * i + j : -1.0;
                CHECK(m[i][j] == want, "Bcast of a column from root %d: m[%d][%d] expected %g, got %g",
                      root, i, j, want, m[i][j]);
            }
    }
    /* The column type on one side, plain doubles on the other. */
    for (root = 0; root < size; root++) {
        double colbuf[NM];
        for (i = 0; i < NM; i++)
            for (j = 0; j < NM; j++)
                m[i][j] = 7.0 * i + j;
        for (i = 0; i < NM; i++)
            colbuf[i] = -1.0;
        if (rank == root)
            CHECK_MPI(MPI_Bcast(&m[0][3], 1, column, root, MPI_COMM_WORLD));
        else
            CHECK_MPI(MPI_Bcast(colbuf, NM, MPI_DOUBLE, root, MPI_COMM_WORLD));
        if (rank != root)
            for (i = 0; i < NM; i++)
                CHECK(colbuf[i] == 7.0 * i + 3, "Bcast column -> doubles elem %d: expected %g, got %g",
                      i, 7.0 * i + 3, colbuf[i]);
    }
    CHECK_MPI(MPI_Type_free(&column));

    /* Allgather of one 4-double element per rank. */
    CHECK_MPI(MPI_Type_contiguous(4, MPI_DOUBLE, &quad));
    CHECK_MPI(MPI_Type_commit(&quad));
    {
        double mine[4], *all = malloc((size_t)size * 4 * sizeof *all);
        CHECK(all != NULL, "malloc");
        for (i = 0; i < 4; i++)
            mine[i] = rank * 10.0 + i;
        CHECK_MPI(MPI_Allgather(mine, 1, quad, all, 1, quad, MPI_COMM_WORLD));
        for (i = 0; i < size * 4; i++)
            CHECK(all[i] == (i / 4) * 10.0 + i % 4, "Allgather of quads elem %d: expected %g, got %g",
                  i, (i / 4) * 10.0 + i % 4, all[i]);
        free(all);
    }
    CHECK_MPI(MPI_Type_free(&quad));
}

/* ------------------------------------------------------- user operations */

static int op_calls_bad_type; /* set when a user function sees a wrong datatype */
static MPI_Datatype quad_type;

/* Commutative: elementwise maximum of absolute values, on MPI_INT. */
static void maxabs_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    int *a = in, *b = inout, i;
    if (*dt != MPI_INT) {
        op_calls_bad_type++;
        return;
    }
    for (i = 0; i < *len; i++) {
        int x = a[i] < 0 ? -a[i] : a[i], y = b[i] < 0 ? -b[i] : b[i];
        b[i] = x > y ? x : y;
    }
}

/* Non-commutative: 2x2 matrix product inout = in * inout, on elements of 4
 * doubles (row-major a b / c d). */
static void matmul_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    double *a = in, *b = inout;
    int i;
    if (*dt != quad_type) {
        op_calls_bad_type++;
        return;
    }
    for (i = 0; i < *len; i++, a += 4, b += 4) {
        double c0 = a[0] * b[0] + a[1] * b[2], c1 = a[0] * b[1] + a[1] * b[3];
        double c2 = a[2] * b[0] + a[3] * b[2], c3 = a[2] * b[1] + a[3] * b[3];
        b[0] = c0;
        b[1] = c1;
        b[2] = c2;
        b[3] = c3;
    }
}

static int maxabs_val(int r, int i) { return ((r * 37 + i * 11) % 201 - 100) * (r % 2 ? -1 : 1); }

/* Rank r's matrix for element k: [[a, 1], [1, 0]] with a in 1..3 and varying
 * with r, so that the product depends on the order. */
static void mat_of(int r, int k, double *m)
{
    m[0] = (double)((r * 2 + k) % 3 + 1);
    m[1] = 1.0;
    m[2] = 1.0;
    m[3] = (double)(k % 2);
}

/* Product of the matrices of ranks lo..hi-1 in rank order. */
static void mat_product(int lo, int hi, int k, double *out)
{
    int r;
    out[0] = 1.0;
    out[1] = 0.0;
    out[2] = 0.0;
    out[3] = 1.0;
    for (r = lo; r < hi; r++) {
        double m[4], t[4];
        mat_of(r, k, m);
        t[0] = out[0] * m[0] + out[1] * m[2];
        t[1] = out[0] * m[1] + out[1] * m[3];
        t[2] = out[2] * m[0] + out[3] * m[2];
        t[3] = out[2] * m[1] + out[3] * m[3];
        memcpy(out, t, sizeof t);
    }
}

#define NMAT 5

static void check_mats(const double *got, int lo, int hi, const char *what)
{
    int k, e;
    for (k = 0; k < NMAT; k++) {
        double want[4];
        mat_product(lo, hi, k, want);
        for (e = 0; e < 4; e++)
            CHECK(got[4 * k + e] == want[e],
                  "%s: matrix %d entry %d of M_%d*...*M_%d expected %g, got %g (order wrong?)",
                  what, k, e, lo, hi - 1, want[e], got[4 * k + e]);
    }
}

static void test_ops(void)
{
    MPI_Op maxabs, matmul;
    int n, root, i;
    static const int counts[] = {1, 7, 1000};
    size_t c;

    CHECK_MPI(MPI_Op_create(maxabs_fn, 1, &maxabs));
    for (c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        int *in, *out, *want;
        n = counts[c];
        in = malloc((size_t)n * sizeof *in);
        out = malloc((size_t)n * sizeof *out);
        want = malloc((size_t)n * sizeof *want);
        CHECK(in && out && want, "malloc");
        for (i = 0; i < n; i++) {
            int r;
            in[i] = maxabs_val(rank, i);
            want[i] = 0;
            for (r = 0; r < size; r++) {
                int v = maxabs_val(r, i);
                v = v < 0 ? -v : v;
                want[i] = v > want[i] ? v : want[i];
            }
        }
        /* With one rank the op is never called and the result is the input
         * itself (the standard does not apply the op to a single value). */
        for (root = 0; root < size; root++) {
            for (i = 0; i < n; i++)
                out[i] = -7;
            CHECK_MPI(MPI_Reduce(in, out, n, MPI_INT, maxabs, root, MPI_COMM_WORLD));
            if (rank == root)
                for (i = 0; i < n; i++) {
                    int w = size == 1 ? in[i] : want[i];
                    CHECK(out[i] == w, "Reduce(maxabs) n=%d root %d elem %d: expected %d, got %d", n,
                          root, i, w, out[i]);
                }
        }
        CHECK_MPI(MPI_Allreduce(in, out, n, MPI_INT, maxabs, MPI_COMM_WORLD));
        for (i = 0; i < n; i++) {
            int w = size == 1 ? in[i] : want[i];
            CHECK(out[i] == w, "Allreduce(maxabs) n=%d elem %d: expected %d, got %d", n, i, w, out[i]);
        }
        free(in);
        free(out);
        free(want);
    }
    CHECK_MPI(MPI_Op_free(&maxabs));
    CHECK(maxabs == MPI_OP_NULL, "MPI_Op_free did not set the handle to MPI_OP_NULL");

    /* Non-commutative matrix product. */
    CHECK_MPI(MPI_Type_contiguous(4, MPI_DOUBLE, &quad_type));
    CHECK_MPI(MPI_Type_commit(&quad_type));
    CHECK_MPI(MPI_Op_create(matmul_fn, 0, &matmul));
    {
        double mine[4 * NMAT], out[4 * NMAT];
        int k;
        for (k = 0; k < NMAT; k++)
            mat_of(rank, k, &mine[4 * k]);
        for (root = 0; root < size; root++) {
            for (i = 0; i < 4 * NMAT; i++)
                out[i] = -1.0;
            CHECK_MPI(MPI_Reduce(mine, out, NMAT, quad_type, matmul, root, MPI_COMM_WORLD));
            if (rank == root)
                check_mats(out, 0, size, "Reduce(matmul)");
        }
        CHECK_MPI(MPI_Allreduce(mine, out, NMAT, quad_type, matmul, MPI_COMM_WORLD));
        check_mats(out, 0, size, "Allreduce(matmul)");
        memcpy(out, mine, sizeof mine);
        CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, out, NMAT, quad_type, matmul, MPI_COMM_WORLD));
        check_mats(out, 0, size, "Allreduce(matmul, MPI_IN_PLACE)");
        CHECK_MPI(MPI_Scan(mine, out, NMAT, quad_type, matmul, MPI_COMM_WORLD));
        check_mats(out, 0, rank + 1, "Scan(matmul)");
        for (i = 0; i < 4 * NMAT; i++)
            out[i] = -1.0;
        CHECK_MPI(MPI_Exscan(mine, out, NMAT, quad_type, matmul, MPI_COMM_WORLD));
        if (rank > 0) /* undefined on rank 0 */
            check_mats(out, 0, rank, "Exscan(matmul)");
    }
    CHECK_MPI(MPI_Op_free(&matmul));
    CHECK(matmul == MPI_OP_NULL, "MPI_Op_free did not set the handle to MPI_OP_NULL");
    CHECK_MPI(MPI_Type_free(&quad_type));
    CHECK(op_calls_bad_type == 0,
          "user op functions were called %d times with a datatype other than the one passed "
          "to the reduction",
          op_calls_bad_type);
}

int main(int argc, char **argv)
{
    int provided = -1;
    CHECK_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided));
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
    check_thread(provided);

    test_sizes();
    test_p2p();
    test_coll();
    test_ops();

    return check_finish();
}
