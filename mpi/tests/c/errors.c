/*
 * errors.c - error handling with MPI_ERRORS_RETURN.
 *
 * With MPI_ERRORS_RETURN set on MPI_COMM_WORLD (MPI_Comm_set_errhandler,
 * read back with MPI_Comm_get_errhandler), erroneous calls must return an
 * error code whose class (MPI_Error_class) is:
 *
 *   negative count                        MPI_ERR_COUNT
 *   rank out of range (dest or source)    MPI_ERR_RANK
 *   negative tag that is not MPI_ANY_TAG  MPI_ERR_TAG   (also MPI_ANY_TAG on a send)
 *   MPI_COMM_NULL                         MPI_ERR_COMM
 *   MPI_DATATYPE_NULL, uncommitted type   MPI_ERR_TYPE
 *   root out of range                     MPI_ERR_ROOT
 *   MPI_OP_NULL                           MPI_ERR_OP
 *   NULL buffer with count > 0            MPI_ERR_BUFFER if an error is returned
 *
 * These are checked strictly: the call must fail, with that class.  Both
 * reference MPIs (MPICH 4.0.2, Open MPI 4.1) return exactly these classes
 * for the calls used here.  Where the standard leaves the outcome open the
 * program prints a NOTE instead of failing:
 *
 *   - MPI_Send/MPI_Recv with a NULL buffer and count 4 (to/from
 *     MPI_PROC_NULL, so that an implementation that accepts it does nothing
 *     harmful): MPI does not require the check (a NULL buffer may even be
 *     MPI_BOTTOM), so accepting it is only noted; an error must be
 *     MPI_ERR_BUFFER.  Both MPICH 4.0.2 (Debian build) and Open MPI 4.1
 *     return MPI_ERR_BUFFER.  Collectives with a NULL buffer are not tried:
 *     Open MPI 4.1 crashes in MPI_Bcast(NULL, 4, ...).
 *   - MPI_Allreduce with MPI_DATATYPE_NULL: MPI_ERR_TYPE or MPI_ERR_OP are
 *     both reasonable; MPICH and Open MPI both return MPI_ERR_OP.
 *
 * Not tried, because a reference MPI crashes instead of returning an error:
 * a negative count in MPI_Allreduce (MPICH 4.0.2 asserts in its pack code).
 *
 * Every error code's MPI_Error_string must be non-empty and NUL-terminated.
 * The program then checks that MPI still works (errhandler inheritance by
 * MPI_Comm_dup and MPI_Comm_split, point-to-point and collectives), restores
 * MPI_ERRORS_ARE_FATAL and ends with a barrier.
 */
#define PROGRAM "errors"
#include "check.h"

#include <string.h>

static int rank, size;

static const char *class_name(int cls)
{
    if (cls == MPI_SUCCESS) return "MPI_SUCCESS";
    if (cls == MPI_ERR_BUFFER) return "MPI_ERR_BUFFER";
    if (cls == MPI_ERR_COUNT) return "MPI_ERR_COUNT";
    if (cls == MPI_ERR_TYPE) return "MPI_ERR_TYPE";
    if (cls == MPI_ERR_TAG) return "MPI_ERR_TAG";
    if (cls == MPI_ERR_COMM) return "MPI_ERR_COMM";
    if (cls == MPI_ERR_RANK) return "MPI_ERR_RANK";
    if (cls == MPI_ERR_ROOT) return "MPI_ERR_ROOT";
    if (cls == MPI_ERR_OP) return "MPI_ERR_OP";
    if (cls == MPI_ERR_ARG) return "MPI_ERR_ARG";
    if (cls == MPI_ERR_REQUEST) return "MPI_ERR_REQUEST";
    if (cls == MPI_ERR_TRUNCATE) return "MPI_ERR_TRUNCATE";
    if (cls == MPI_ERR_OTHER) return "MPI_ERR_OTHER";
    if (cls == MPI_ERR_INTERN) return "MPI_ERR_INTERN";
    if (cls == MPI_ERR_IN_STATUS) return "MPI_ERR_IN_STATUS";
    if (cls == MPI_ERR_PENDING) return "MPI_ERR_PENDING";
    return "(another class)";
}

/* MPI_Error_string of any code or class: non-empty, NUL-terminated, length
 * as reported, < MPI_MAX_ERROR_STRING. */
static void check_error_string(int code, const char *what)
{
    char s[MPI_MAX_ERROR_STRING + 1];
    int len = -1;
    memset(s, 'x', sizeof s);
    CHECK_MPI(MPI_Error_string(code, s, &len));
    CHECK(len > 0 && len < MPI_MAX_ERROR_STRING,
          "%s: MPI_Error_string(%d) length expected 1..%d, got %d", what, code,
          MPI_MAX_ERROR_STRING - 1, len);
    CHECK(s[len] == '\0' && (int)strlen(s) == len,
          "%s: MPI_Error_string(%d) not NUL-terminated at its length %d", what, code, len);
}

static int class_of(int rc)
{
    int cls = -1;
    CHECK_MPI(MPI_Error_class(rc, &cls));
    return cls;
}

/* Strict: the call must fail with class `want`. */
static void expect(int rc, int want, const char *call)
{
    int cls;
    CHECK(rc != MPI_SUCCESS, "%s: expected class %s (%d), got MPI_SUCCESS", call,
          class_name(want), want);
    cls = class_of(rc);
    CHECK(cls == want, "%s: expected class %s (%d), got %s (%d), code %d", call, class_name(want),
          want, class_name(cls), cls, rc);
    check_error_string(rc, call);
}
#define EXPECT(call, cls) expect((call), (cls), #call)

/* Open: print what happened. */
static void note_outcome(int rc, const char *call, const char *standard)
{
    if (rc != MPI_SUCCESS)
        check_error_string(rc, call);
    if (rank == 0) {
        int cls = rc == MPI_SUCCESS ? MPI_SUCCESS : class_of(rc);
        check_note("%s returned %s (%d) [%s]", call, class_name(cls), cls, standard);
    }
}

static void test_classes(void)
{
    static const int classes[] = {MPI_ERR_BUFFER, MPI_ERR_COUNT, MPI_ERR_TYPE, MPI_ERR_TAG,
                                  MPI_ERR_COMM, MPI_ERR_RANK, MPI_ERR_ROOT, MPI_ERR_OP,
                                  MPI_ERR_ARG, MPI_ERR_REQUEST, MPI_ERR_TRUNCATE, MPI_ERR_OTHER,
                                  MPI_ERR_INTERN, MPI_ERR_IN_STATUS, MPI_ERR_PENDING};
    const int n = (int)(sizeof classes / sizeof classes[0]);
    int i, j;

    CHECK(MPI_SUCCESS == 0, "MPI_SUCCESS must be 0, is %d", MPI_SUCCESS);
    CHECK(class_of(MPI_SUCCESS) == MPI_SUCCESS, "MPI_Error_class(MPI_SUCCESS): expected %d, got %d",
          MPI_SUCCESS, class_of(MPI_SUCCESS));
    check_error_string(MPI_SUCCESS, "MPI_SUCCESS");
    for (i = 0; i < n; i++) {
        CHECK(classes[i] > MPI_SUCCESS && classes[i] <= MPI_ERR_LASTCODE,
              "error class %s = %d not in 1..MPI_ERR_LASTCODE (%d)", class_name(classes[i]),
              classes[i], MPI_ERR_LASTCODE);
        for (j = 0; j < i; j++)
            CHECK(classes[i] != classes[j], "error classes %s and %s are both %d",
                  class_name(classes[i]), class_name(classes[j]), classes[i]);
        /* A class is its own class. */
        CHECK(class_of(classes[i]) == classes[i], "MPI_Error_class(%s): expected %d, got %d",
              class_name(classes[i]), classes[i], class_of(classes[i]));
        check_error_string(classes[i], class_name(classes[i]));
    }
}

static void test_errors(MPI_Comm comm, const char *name)
{
    int buf[8] = {0}, out[8] = {0}, csize, me;
    MPI_Status st;
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Datatype uncommitted;
    int dest, rc;

    CHECK_MPI(MPI_Comm_size(comm, &csize));
    CHECK_MPI(MPI_Comm_rank(comm, &me));
    dest = (me + 1) % csize;
    (void)name;

    /* Negative count. */
    EXPECT(MPI_Send(buf, -1, MPI_INT, dest, 0, comm), MPI_ERR_COUNT);
    EXPECT(MPI_Isend(buf, -1, MPI_INT, dest, 0, comm, &req), MPI_ERR_COUNT);
    EXPECT(MPI_Recv(buf, -1, MPI_INT, dest, 0, comm, &st), MPI_ERR_COUNT);
    EXPECT(MPI_Irecv(buf, -3, MPI_INT, MPI_ANY_SOURCE, 0, comm, &req), MPI_ERR_COUNT);
    EXPECT(MPI_Bcast(buf, -1, MPI_INT, 0, comm), MPI_ERR_COUNT);

    /* Rank out of range. */
    EXPECT(MPI_Send(buf, 1, MPI_INT, csize, 0, comm), MPI_ERR_RANK);
    EXPECT(MPI_Send(buf, 1, MPI_INT, -5, 0, comm), MPI_ERR_RANK);
    EXPECT(MPI_Ssend(buf, 1, MPI_INT, csize + 7, 0, comm), MPI_ERR_RANK);
    EXPECT(MPI_Isend(buf, 1, MPI_INT, csize, 0, comm, &req), MPI_ERR_RANK);
    EXPECT(MPI_Recv(buf, 1, MPI_INT, csize, 0, comm, &st), MPI_ERR_RANK);
    EXPECT(MPI_Irecv(buf, 1, MPI_INT, csize + 3, 0, comm, &req), MPI_ERR_RANK);
    EXPECT(MPI_Probe(csize, 0, comm, &st), MPI_ERR_RANK);
    EXPECT(MPI_Sendrecv(buf, 1, MPI_INT, csize, 0, out, 1, MPI_INT, me, 0, comm, &st),
           MPI_ERR_RANK);

    /* Bad tag: negative and not MPI_ANY_TAG (and MPI_ANY_TAG on a send). */
    {
        int bad = MPI_ANY_TAG == -5 ? -6 : -5;
        EXPECT(MPI_Send(buf, 1, MPI_INT, dest, bad, comm), MPI_ERR_TAG);
        EXPECT(MPI_Isend(buf, 1, MPI_INT, dest, bad, comm, &req), MPI_ERR_TAG);
        EXPECT(MPI_Recv(buf, 1, MPI_INT, dest, bad, comm, &st), MPI_ERR_TAG);
        EXPECT(MPI_Irecv(buf, 1, MPI_INT, dest, bad, comm, &req), MPI_ERR_TAG);
        EXPECT(MPI_Send(buf, 1, MPI_INT, dest, MPI_ANY_TAG, comm), MPI_ERR_TAG);
    }

    /* Invalid datatypes. */
    EXPECT(MPI_Send(buf, 1, MPI_DATATYPE_NULL, dest, 0, comm), MPI_ERR_TYPE);
    EXPECT(MPI_Recv(buf, 1, MPI_DATATYPE_NULL, dest, 0, comm, &st), MPI_ERR_TYPE);
    EXPECT(MPI_Bcast(buf, 1, MPI_DATATYPE_NULL, 0, comm), MPI_ERR_TYPE);
    CHECK_MPI(MPI_Type_vector(2, 1, 2, MPI_INT, &uncommitted));
    EXPECT(MPI_Send(buf, 1, uncommitted, dest, 0, comm), MPI_ERR_TYPE);
    CHECK_MPI(MPI_Type_free(&uncommitted));

    /* Invalid root (every rank passes the same bad root, so no rank enters
     * the collective). */
    EXPECT(MPI_Bcast(buf, 1, MPI_INT, csize, comm), MPI_ERR_ROOT);
    EXPECT(MPI_Bcast(buf, 1, MPI_INT, -1, comm), MPI_ERR_ROOT);
    EXPECT(MPI_Reduce(buf, out, 1, MPI_INT, MPI_SUM, csize, comm), MPI_ERR_ROOT);
    EXPECT(MPI_Gather(buf, 1, MPI_INT, out, 1, MPI_INT, csize + 2, comm), MPI_ERR_ROOT);
    EXPECT(MPI_Ibcast(buf, 1, MPI_INT, csize, comm, &req), MPI_ERR_ROOT);

    /* Invalid op. */
    EXPECT(MPI_Allreduce(buf, out, 1, MPI_INT, MPI_OP_NULL, comm), MPI_ERR_OP);
    EXPECT(MPI_Reduce(buf, out, 1, MPI_INT, MPI_OP_NULL, 0, comm), MPI_ERR_OP);

    /* NULL buffer with count > 0 (to/from MPI_PROC_NULL, harmless if
     * accepted).  The standard does not require this check; an error, if
     * any, must be MPI_ERR_BUFFER. */
    rc = MPI_Send(NULL, 4, MPI_INT, MPI_PROC_NULL, 0, comm);
    if (rc != MPI_SUCCESS)
        EXPECT(rc, MPI_ERR_BUFFER);
    note_outcome(rc, "MPI_Send(NULL, 4, MPI_INT, MPI_PROC_NULL, ...)",
                 "detection optional; MPI_ERR_BUFFER if detected");
    rc = MPI_Recv(NULL, 4, MPI_INT, MPI_PROC_NULL, 0, comm, &st);
    if (rc != MPI_SUCCESS)
        EXPECT(rc, MPI_ERR_BUFFER);
    note_outcome(rc, "MPI_Recv(NULL, 4, MPI_INT, MPI_PROC_NULL, ...)",
                 "detection optional; MPI_ERR_BUFFER if detected");

    /* MPI_DATATYPE_NULL in a reduction: MPI_ERR_TYPE or MPI_ERR_OP. */
    rc = MPI_Allreduce(buf, out, 1, MPI_DATATYPE_NULL, MPI_SUM, comm);
    CHECK(rc != MPI_SUCCESS, "MPI_Allreduce with MPI_DATATYPE_NULL: expected an error, got "
                             "MPI_SUCCESS");
    note_outcome(rc, "MPI_Allreduce(..., MPI_DATATYPE_NULL, MPI_SUM, ...)",
                 "MPI_ERR_TYPE or MPI_ERR_OP");

}

static void test_comm_null(void)
{
    int buf[4] = {0}, n = -1;
    MPI_Status st;
    MPI_Request req;
    EXPECT(MPI_Send(buf, 1, MPI_INT, 0, 0, MPI_COMM_NULL), MPI_ERR_COMM);
    EXPECT(MPI_Isend(buf, 1, MPI_INT, 0, 0, MPI_COMM_NULL, &req), MPI_ERR_COMM);
    EXPECT(MPI_Recv(buf, 1, MPI_INT, 0, 0, MPI_COMM_NULL, &st), MPI_ERR_COMM);
    EXPECT(MPI_Barrier(MPI_COMM_NULL), MPI_ERR_COMM);
    EXPECT(MPI_Bcast(buf, 1, MPI_INT, 0, MPI_COMM_NULL), MPI_ERR_COMM);
    EXPECT(MPI_Allreduce(buf, buf + 2, 1, MPI_INT, MPI_SUM, MPI_COMM_NULL), MPI_ERR_COMM);
    EXPECT(MPI_Comm_size(MPI_COMM_NULL, &n), MPI_ERR_COMM);
    EXPECT(MPI_Comm_rank(MPI_COMM_NULL, &n), MPI_ERR_COMM);
}

/* MPI still works: messages and collectives on the communicator. */
static void check_usable(MPI_Comm comm, const char *name)
{
    int me, csize, out, in = -1, sum = -1;
    CHECK_MPI(MPI_Comm_rank(comm, &me));
    CHECK_MPI(MPI_Comm_size(comm, &csize));
    out = me * 3;
    CHECK_MPI(MPI_Sendrecv(&out, 1, MPI_INT, (me + 1) % csize, 9, &in, 1, MPI_INT,
                           (me + csize - 1) % csize, 9, comm, MPI_STATUS_IGNORE));
    CHECK(in == ((me + csize - 1) % csize) * 3, "%s after errors: Sendrecv expected %d, got %d",
          name, ((me + csize - 1) % csize) * 3, in);
    CHECK_MPI(MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, comm));
    CHECK(sum == csize * (csize - 1) / 2, "%s after errors: Allreduce expected %d, got %d", name,
          csize * (csize - 1) / 2, sum);
    CHECK_MPI(MPI_Barrier(comm));
}

int main(int argc, char **argv)
{
    MPI_Errhandler eh;
    MPI_Comm dup, split;

    CHECK_MPI(MPI_Init(&argc, &argv));
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));

    /* The default handler of MPI_COMM_WORLD is MPI_ERRORS_ARE_FATAL. */
    CHECK_MPI(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh));
    CHECK(eh == MPI_ERRORS_ARE_FATAL,
          "default error handler of MPI_COMM_WORLD: expected MPI_ERRORS_ARE_FATAL");
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh));
    CHECK(eh == MPI_ERRORS_RETURN, "MPI_Comm_get_errhandler after set: expected MPI_ERRORS_RETURN");

    test_classes();
    test_errors(MPI_COMM_WORLD, "MPI_COMM_WORLD");
    test_comm_null();
    check_usable(MPI_COMM_WORLD, "MPI_COMM_WORLD");

    /* New communicators inherit the error handler (MPI-3.1 section 8.3). */
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    CHECK_MPI(MPI_Comm_get_errhandler(dup, &eh));
    CHECK(eh == MPI_ERRORS_RETURN, "MPI_Comm_dup did not inherit MPI_ERRORS_RETURN");
    test_errors(dup, "dup");
    check_usable(dup, "dup");
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &split));
    CHECK_MPI(MPI_Comm_get_errhandler(split, &eh));
    CHECK(eh == MPI_ERRORS_RETURN, "MPI_Comm_split did not inherit MPI_ERRORS_RETURN");
    test_errors(split, "split");
    check_usable(split, "split");
    CHECK_MPI(MPI_Comm_free(&split));
    CHECK_MPI(MPI_Comm_free(&dup));

    /* Back to fatal errors; MPI still works. */
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    CHECK_MPI(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh));
    CHECK(eh == MPI_ERRORS_ARE_FATAL, "MPI_Comm_get_errhandler after reset: expected "
                                      "MPI_ERRORS_ARE_FATAL");
    check_usable(MPI_COMM_WORLD, "MPI_COMM_WORLD (fatal again)");

    return check_finish();
}
