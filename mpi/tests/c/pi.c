/*
 * pi.c - the classic cpi example: rank 0 broadcasts the number of intervals
 * n = 1e6, every rank integrates 4/(1+x^2) over its share of the intervals
 * with the midpoint rule, and MPI_Reduce(MPI_SUM) collects the sum at rank 0,
 * which checks |pi - M_PI| < 1e-9.  The result is also cross-checked with
 * MPI_Allreduce on every rank.
 */
#define PROGRAM "pi"
#include "check.h"

#include <math.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static double f(double x) { return 4.0 / (1.0 + x * x); }

int main(int argc, char **argv)
{
    int rank, size, n = 0, i;
    double h, sum = 0.0, mypi, pi = 0.0, pi_all = 0.0, t0;

    CHECK_MPI(MPI_Init(&argc, &argv));
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));

    t0 = MPI_Wtime();
    if (rank == 0)
        n = 1000000;
    CHECK_MPI(MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD));
    CHECK(n == 1000000, "MPI_Bcast of n: expected 1000000, got %d", n);

    h = 1.0 / (double)n;
    for (i = rank + 1; i <= n; i += size) {
        double x = h * ((double)i - 0.5);
        sum += f(x);
    }
    mypi = h * sum;

    CHECK_MPI(MPI_Reduce(&mypi, &pi, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
    if (rank == 0) {
        double err = fabs(pi - M_PI);
        printf("pi is approximately %.16f, error is %.3e, %d intervals, %.3f s\n", pi, err, n,
               MPI_Wtime() - t0);
        CHECK(err < 1e-9, "pi: expected |pi - M_PI| < 1e-9, got pi = %.16f (error %.3e)", pi,
              err);
    }

    CHECK_MPI(MPI_Allreduce(&mypi, &pi_all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    CHECK(fabs(pi_all - M_PI) < 1e-9, "Allreduce pi: expected within 1e-9 of M_PI, got %.16f",
          pi_all);

    return check_finish();
}
