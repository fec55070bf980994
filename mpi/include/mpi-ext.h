/*
 * mpi-ext.h -- BCL's MPI extensions beyond mpi.h: the part of the MPI
 * fault-tolerance proposal (ULFM) that BCL implements, under the names
 * MPICH's and Open MPI's ULFM builds use.
 *
 * A program that sets MPI_ERRORS_RETURN on a communicator gets
 * MPIX_ERR_PROC_FAILED (declared in mpi.h) from an operation that a failed
 * process keeps from completing -- in a collective, at every survivor, not
 * only at the failed process's partners -- and then calls
 * MPIX_Comm_shrink to go on with the survivors.
 *
 * Kept apart from mpi.h, whose declarations must match MPICH's own header
 * (mpi/tests/abi-check.sh), which has no MPIX_Comm_shrink.
 */
#ifndef BCL_MPI_EXT_H_INCLUDED
#define BCL_MPI_EXT_H_INCLUDED

#include <mpi.h>

#if defined(__cplusplus)
extern "C" {
#endif

/* Defined when MPIX_Comm_shrink is available (Open MPI's ULFM convention). */
#define MPIX_FT_SHRINK 1

/*
 * The survivors of comm agree on which of its processes failed and get a
 * communicator of the others, ranked in comm's order (collective over the
 * survivors; every survivor gets the same members). The new communicator
 * has comm's error handler.
 */
int MPIX_Comm_shrink(MPI_Comm comm, MPI_Comm *newcomm);

#if defined(__cplusplus)
}
#endif

#endif /* BCL_MPI_EXT_H_INCLUDED */
