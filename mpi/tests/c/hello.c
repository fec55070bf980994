/*
 * hello.c - the basics: MPI_Initialized/MPI_Finalized before MPI_Init, after
 * MPI_Init and after MPI_Finalize; rank and size; processor name;
 * MPI_Get_version (at least 3.1); MPI_Get_library_version
 * (printed by rank 0); MPI_Wtime monotone and MPI_Wtick > 0.
 */
#define PROGRAM "hello"
#include "check.h"

#include <string.h>

int main(int argc, char **argv)
{
    int flag = -1, rank = -1, size = -1;

    /* Both may be called before MPI_Init (MPI-3.1 section 8.7). */
    CHECK_MPI(MPI_Initialized(&flag));
    CHECK(flag == 0, "MPI_Initialized before MPI_Init: expected 0, got %d", flag);
    flag = -1;
    CHECK_MPI(MPI_Finalized(&flag));
    CHECK(flag == 0, "MPI_Finalized before MPI_Init: expected 0, got %d", flag);

    CHECK_MPI(MPI_Init(&argc, &argv));

    flag = -1;
    CHECK_MPI(MPI_Initialized(&flag));
    CHECK(flag != 0, "MPI_Initialized after MPI_Init: expected true, got %d", flag);
    flag = -1;
    CHECK_MPI(MPI_Finalized(&flag));
    CHECK(flag == 0, "MPI_Finalized after MPI_Init: expected 0, got %d", flag);

    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 1, "MPI_Comm_size(MPI_COMM_WORLD): expected >= 1, got %d", size);
    CHECK(rank >= 0 && rank < size,
          "MPI_Comm_rank(MPI_COMM_WORLD): expected 0..%d, got %d", size - 1, rank);

    /* MPI_COMM_SELF: size 1, rank 0. */
    {
        int srank = -1, ssize = -1;
        CHECK_MPI(MPI_Comm_rank(MPI_COMM_SELF, &srank));
        CHECK_MPI(MPI_Comm_size(MPI_COMM_SELF, &ssize));
        CHECK(srank == 0 && ssize == 1,
              "MPI_COMM_SELF: expected rank 0 size 1, got rank %d size %d", srank, ssize);
    }

    /* Every rank has a distinct rank and all agree on the size. */
    {
        int sum = -1, maxsize = -1, minsize = -1;
        CHECK_MPI(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        CHECK(sum == size * (size - 1) / 2,
              "sum of ranks: expected %d, got %d", size * (size - 1) / 2, sum);
        CHECK_MPI(MPI_Allreduce(&size, &maxsize, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Allreduce(&size, &minsize, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
        CHECK(maxsize == size && minsize == size,
              "sizes differ between ranks: min %d max %d, mine %d", minsize, maxsize, size);
    }

    /* Processor name: NUL-terminated, length as reported, < MAX. */
    {
        char name[MPI_MAX_PROCESSOR_NAME + 1];
        int len = -1;
        memset(name, 'x', sizeof name);
        CHECK_MPI(MPI_Get_processor_name(name, &len));
        CHECK(len > 0 && len < MPI_MAX_PROCESSOR_NAME,
              "MPI_Get_processor_name length: expected 1..%d, got %d",
              MPI_MAX_PROCESSOR_NAME - 1, len);
        CHECK(name[len] == '\0', "processor name not NUL-terminated at length %d", len);
        CHECK((int)strlen(name) == len,
              "processor name: strlen %d != reported length %d", (int)strlen(name), len);
    }

    /* Version: at least 3.1. The library's own version may differ from
     * the header's when a program built against one MPI runs on another
     * of the same ABI (MPICH 4.0's mpi.h says 4.0, BCL's library 3.1): a
     * difference is printed, not failed. */
    {
        int version = -1, subversion = -1;
        CHECK_MPI(MPI_Get_version(&version, &subversion));
        if ((version != MPI_VERSION || subversion != MPI_SUBVERSION) && rank == 0)
            printf("NOTE: MPI_Get_version gives %d.%d, mpi.h says %d.%d\n", version, subversion,
                   MPI_VERSION, MPI_SUBVERSION);
        CHECK(version > 3 || (version == 3 && subversion >= 1),
              "MPI_Get_version: expected >= 3.1, got %d.%d", version, subversion);
        if (rank == 0)
            printf("MPI version %d.%d\n", version, subversion);
    }

    /* Library version string: NUL-terminated, non-empty, < MAX. */
    {
        static char lib[MPI_MAX_LIBRARY_VERSION_STRING + 1];
        int len = -1;
        memset(lib, 'x', sizeof lib);
        CHECK_MPI(MPI_Get_library_version(lib, &len));
        /* Known Open MPI 4.1 deviation: resultlen counts the terminating NUL
         * (lib[len - 1] == '\0').  MPI-3.1 section 8.1.1: resultlen is the
         * number of characters written, and a NUL is additionally stored at
         * version[resultlen]. */
        if (len >= 1 && lib[len - 1] == '\0' && lib[len] != '\0' &&
            check_known_deviation("Open MPI",
                                  "MPI_Get_library_version resultlen %d includes the NUL "
                                  "(strlen is %d)",
                                  len, (int)strlen(lib)))
            len--;
        CHECK(len > 0 && len < MPI_MAX_LIBRARY_VERSION_STRING,
              "MPI_Get_library_version length: expected 1..%d, got %d",
              MPI_MAX_LIBRARY_VERSION_STRING - 1, len);
        CHECK(lib[len] == '\0', "library version not NUL-terminated at length %d", len);
        CHECK((int)strlen(lib) == len,
              "library version: strlen %d != reported length %d", (int)strlen(lib), len);
        if (rank == 0) {
            /* Print the first line only; some libraries add a long
             * configuration dump. */
            const char *nl = strchr(lib, '\n');
            int first = nl ? (int)(nl - lib) : len;
            printf("MPI library: %.*s\n", first, lib);
        }
    }

    /* Wtime never goes backwards and advances; Wtick is a positive
     * resolution. */
    {
        double tick = MPI_Wtick();
        double start = MPI_Wtime(), prev = start, now = start;
        long i;
        CHECK(tick > 0.0 && tick < 1.0, "MPI_Wtick: expected in (0, 1), got %g", tick);
        for (i = 0; i < 100000; i++) {
            now = MPI_Wtime();
            CHECK(now >= prev, "MPI_Wtime went backwards: %.9f then %.9f", prev, now);
            prev = now;
        }
        /* Spin until 10 ms have passed, bounded so that a clock that never
         * advances fails instead of hanging. */
        for (i = 0; i < 100000000L && now - start < 0.01; i++) {
            now = MPI_Wtime();
            CHECK(now >= prev, "MPI_Wtime went backwards: %.9f then %.9f", prev, now);
            prev = now;
        }
        CHECK(now - start >= 0.01,
              "MPI_Wtime did not advance by 10 ms: %.9f -> %.9f", start, now);
        CHECK(now - start < 60.0, "MPI_Wtime advanced implausibly: %.9f -> %.9f", start, now);
    }

    {
        int finalized = -1, initialized = -1;
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_MPI(MPI_Finalize());
        /* Both may be called after MPI_Finalize. */
        CHECK_MPI(MPI_Initialized(&initialized));
        CHECK(initialized != 0,
              "MPI_Initialized after MPI_Finalize: expected true, got %d", initialized);
        CHECK_MPI(MPI_Finalized(&finalized));
        CHECK(finalized != 0,
              "MPI_Finalized after MPI_Finalize: expected true, got %d", finalized);
    }
    if (rank == 0) {
        printf("OK %s ranks=%d\n", PROGRAM, size);
        fflush(stdout);
    }
    return 0;
}
