/*
 * check.h - tiny shared helpers for the BCL MPI C test programs.
 *
 * Each program defines PROGRAM (its name, a string literal) before including
 * this header.  A failed CHECK prints
 *
 *     FAIL <program> rank=<r>: <message> (<file>:<line>: <condition>)
 *
 * to stderr and calls MPI_Abort(MPI_COMM_WORLD, 1) (or exit(1) when MPI is not
 * initialized or already finalized).  NOTE lines go to stderr as well, so that
 * the last line on stdout is always the `OK <program> ranks=<N>` line printed
 * by rank 0 from check_finish().
 *
 * Only standard MPI-3.1 functions from the libbclmpi function list are used.
 */
#ifndef BCL_MPI_TEST_CHECK_H
#define BCL_MPI_TEST_CHECK_H

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GCC >= 11 with -O2 warns (-Wstringop-overflow) when MPI_STATUSES_IGNORE,
 * which MPICH-ABI headers define as (MPI_Status *)1, is passed to a function
 * declared with an array parameter (MPI_Waitall(..., MPI_Status
 * array_of_statuses[])).  Passing MPI_STATUSES_IGNORE is correct MPI, so this
 * false positive is silenced for the test programs. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

#ifndef PROGRAM
#error "define PROGRAM (the program name) before including check.h"
#endif

/* Rank in MPI_COMM_WORLD, or -1 when MPI is not usable (before MPI_Init or
 * after MPI_Finalize). */
static inline int check_world_rank(void)
{
    int initialized = 0, finalized = 0, rank = -1;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized)
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

#if defined(__GNUC__)
static inline void check_abort(void) __attribute__((noreturn));
#endif
static inline void check_abort(void)
{
    int initialized = 0, finalized = 0;
    fflush(stdout);
    fflush(stderr);
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized)
        MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

#if defined(__GNUC__)
static inline void check_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), noreturn));
#endif
static inline void check_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* One fprintf, so that lines of different ranks do not interleave. */
    fprintf(stderr, "FAIL %s rank=%d: %s (%s:%d: %s)\n", PROGRAM, check_world_rank(), msg, file,
            line, cond);
    check_abort();
}

/* CHECK(condition, printf-format, args...): the message should say what was
 * checked, what was expected and what was found. */
#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond))                                                           \
            check_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                \
    } while (0)

/* CHECK_MPI(call): the MPI call must return MPI_SUCCESS. */
#define CHECK_MPI(call)                                                        \
    do {                                                                       \
        int check_rc_ = (call);                                                \
        if (check_rc_ != MPI_SUCCESS) {                                        \
            char check_s_[MPI_MAX_ERROR_STRING] = "";                          \
            int check_l_ = 0;                                                  \
            MPI_Error_string(check_rc_, check_s_, &check_l_);                  \
            CHECK(check_rc_ == MPI_SUCCESS,                                    \
                  "%s: expected MPI_SUCCESS, got %d (%s)", #call, check_rc_,   \
                  check_s_);                                                   \
        }                                                                      \
    } while (0)

/* A remark about behaviour the MPI standard leaves open: printed, never a
 * failure. */
#if defined(__GNUC__)
static inline void check_note(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
#endif
static inline void check_note(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "NOTE %s rank=%d: %s\n", PROGRAM, check_world_rank(), msg);
    fflush(stderr);
}

/* Known deviations of the two reference MPIs.
 *
 * A few strict checks (behaviour the MPI standard requires) fail on MPICH
 * 4.0.2 or Open MPI 4.1 because of bugs in those libraries.  Such a check is
 * written as
 *
 *     if (!(cond) && check_known_deviation("Open MPI", "what differs"))
 *         ...skip what depends on it...;
 *     else
 *         CHECK(cond, ...);
 *
 * check_known_deviation() returns 1 (and prints a NOTE) only when the running
 * library's MPI_Get_library_version string shows it is `library` ("MPICH":
 * starts with "MPICH Version:"; "Open MPI": starts with "Open MPI"); for every
 * other library, libbclmpi included, it
 * returns 0 and the CHECK stays strict. */
static inline int check_library_is(const char *library)
{
    static char version[MPI_MAX_LIBRARY_VERSION_STRING + 1];
    const char *prefix = strcmp(library, "MPICH") == 0 ? "MPICH Version:" : library;
    int len = 0;
    if (MPI_Get_library_version(version, &len) != MPI_SUCCESS)
        return 0;
    version[MPI_MAX_LIBRARY_VERSION_STRING] = '\0';
    return strncmp(version, prefix, strlen(prefix)) == 0;
}

#if defined(__GNUC__)
static inline int check_known_deviation(const char *library, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#endif
static inline int check_known_deviation(const char *library, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    if (!check_library_is(library))
        return 0;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "NOTE %s rank=%d: known %s deviation: %s\n", PROGRAM, check_world_rank(),
            library, msg);
    fflush(stderr);
    return 1;
}

/* Barrier, MPI_Finalize, then rank 0 prints the final OK line.  Returns the
 * exit status for main(). */
static inline int check_finish(void)
{
    int rank = -1, size = 0;
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    fflush(stdout);
    CHECK_MPI(MPI_Finalize());
    if (rank == 0) {
        printf("OK %s ranks=%d\n", PROGRAM, size);
        fflush(stdout);
    }
    return 0;
}

#endif /* BCL_MPI_TEST_CHECK_H */
