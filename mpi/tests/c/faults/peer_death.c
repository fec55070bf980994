/*
 * peer_death.c - a rank that dies makes operations with it fail instead of
 * hanging (MPI_ERRORS_RETURN): the last rank exits without MPI_Finalize
 * after a barrier; the others see MPIX_ERR_PROC_FAILED from a receive from
 * it, a non-blocking receive from it, a large send to it and a barrier
 * with it, with an error string that names the failed rank, and go on
 * talking among themselves.
 *
 * BCL only (MPIX_ERR_PROC_FAILED is MPICH's extension class; launchers
 * such as hydra stop the whole job when a rank exits without finalizing,
 * so run it under bcl-run). Prints "OK peer_death ranks=N" from rank 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size;

static void expect_failed(int rc, const char *what, int named)
{
    int cls = -1;
    char msg[MPI_MAX_ERROR_STRING], want[32];
    int len = 0;
    if (rc == MPI_SUCCESS) {
        fprintf(stderr, "FAIL peer_death rank=%d: %s succeeded with its peer dead\n", rank, what);
        exit(1);
    }
    MPI_Error_class(rc, &cls);
    MPI_Error_string(rc, msg, &len);
    if (cls != MPIX_ERR_PROC_FAILED) {
        fprintf(stderr, "FAIL peer_death rank=%d: %s: expected MPIX_ERR_PROC_FAILED (%d), got class %d: %s\n",
                rank, what, MPIX_ERR_PROC_FAILED, cls, msg);
        exit(1);
    }
    /* The message names the failed rank: the dead one, or (collectives,
     * whose survivors may leave once they see the failure) one of them. */
    if (named >= 0)
        snprintf(want, sizeof want, "(rank %d)", named);
    else
        snprintf(want, sizeof want, "(rank ");
    if (!strstr(msg, want)) {
        fprintf(stderr, "FAIL peer_death rank=%d: %s: the error does not name %s: %s\n", rank, what,
                want, msg);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    int x = 0, dead;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0)
            printf("OK peer_death ranks=%d\n", size);
        MPI_Finalize();
        return 0;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    dead = size - 1;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == dead)
        _exit(0);

    expect_failed(MPI_Recv(&x, 1, MPI_INT, dead, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv", dead);
    {
        MPI_Request r;
        int rc = MPI_Irecv(&x, 1, MPI_INT, dead, 1, MPI_COMM_WORLD, &r);
        if (rc == MPI_SUCCESS)
            rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
        expect_failed(rc, "MPI_Irecv + MPI_Wait", dead);
    }
    {
        size_t n = 1 << 20;
        char *big = calloc(n, 1);
        expect_failed(MPI_Send(big, (int)n, MPI_BYTE, dead, 2, MPI_COMM_WORLD), "a 1 MiB MPI_Send", dead);
        free(big);
    }
    expect_failed(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", -1);

    /* The survivors still talk. */
    if (size > 2) {
        int token = rank == 0 ? 42 : -1;
        if (rank == 0) {
            if (MPI_Send(&token, 1, MPI_INT, 1, 3, MPI_COMM_WORLD) != MPI_SUCCESS)
                exit(1);
        } else if (rank == 1) {
            if (MPI_Recv(&token, 1, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
                token != 42) {
                fprintf(stderr, "FAIL peer_death rank=1: survivors' message lost\n");
                exit(1);
            }
        }
    }
    if (rank == 0)
        printf("OK peer_death ranks=%d\n", size);
    return 0;
}
