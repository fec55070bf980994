/*
 * shrink.c - the survivors of a rank's death go on in a shrunk
 * communicator (MPI_ERRORS_RETURN, mpi-ext.h's MPIX_Comm_shrink): the last
 * rank exits without MPI_Finalize after a barrier; every survivor's
 * MPI_Allreduce on MPI_COMM_WORLD then fails with MPIX_ERR_PROC_FAILED (also
 * at ranks that never talk to it in the algorithm), the next collective on
 * the world fails at once, MPIX_Comm_shrink gives every survivor the same
 * communicator of size - 1 ranked as in the world, and an MPI_Allreduce and
 * an MPI_Barrier there succeed, and so does MPI_Finalize.
 *
 * BCL only (MPIX_Comm_shrink is the fault-tolerance proposal's; run it under
 * bcl-run: hydra stops the whole job when a rank exits without
 * finalizing). Prints "OK shrink ranks=N" from rank 0.
 */
#include <mpi.h>
#include <mpi-ext.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int rank, size;

static void fail(const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    msg[0] = 0;
    if (rc != MPI_SUCCESS)
        MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "FAIL shrink rank=%d: %s (%s)\n", rank, what, msg);
    exit(1);
}

static void expect_proc_failed(int rc, const char *what)
{
    int cls = -1;
    if (rc == MPI_SUCCESS)
        fail(what, rc);
    MPI_Error_class(rc, &cls);
    if (cls != MPIX_ERR_PROC_FAILED)
        fail(what, rc);
}

int main(int argc, char **argv)
{
    int one = 1, sum = 0, srank = -1, ssize = 0, wsum = 0, expect = 0, i;
    MPI_Comm survivors;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0)
            printf("OK shrink ranks=%d\n", size);
        MPI_Finalize();
        return 0;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == size - 1)
        _exit(0);

    expect_proc_failed(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
                       "MPI_Allreduce on the world with a rank dead");
    expect_proc_failed(MPI_Barrier(MPI_COMM_WORLD), "the next MPI_Barrier on the world");

    if (MPIX_Comm_shrink(MPI_COMM_WORLD, &survivors) != MPI_SUCCESS)
        fail("MPIX_Comm_shrink", MPI_ERR_OTHER);
    MPI_Comm_rank(survivors, &srank);
    MPI_Comm_size(survivors, &ssize);
    if (ssize != size - 1 || srank != rank)
        fail("the shrunk communicator's size or rank", MPI_SUCCESS);
    if (MPI_Allreduce(&rank, &wsum, 1, MPI_INT, MPI_SUM, survivors) != MPI_SUCCESS)
        fail("MPI_Allreduce on the survivors", MPI_SUCCESS);
    for (i = 0; i < size - 1; i++)
        expect += i;
    if (wsum != expect)
        fail("the survivors' sum", MPI_SUCCESS);
    if (MPI_Barrier(survivors) != MPI_SUCCESS)
        fail("MPI_Barrier on the survivors", MPI_SUCCESS);
    MPI_Comm_free(&survivors);
    /* MPI_Finalize completes without the dead rank (and delivers the
     * survivors' last messages). */
    if (MPI_Finalize() != MPI_SUCCESS)
        fail("MPI_Finalize with a rank dead", MPI_SUCCESS);
    if (rank == 0)
        printf("OK shrink ranks=%d\n", size);
    return 0;
}
