/*
 * ABI constants of an mpi.h, one per line as "NAME VALUE".
 *
 * mpi/tests/abi-check.sh builds this program twice, once against BCL's
 * mpi/include/mpi.h and once against MPICH's, runs both and diffs the
 * output: any difference is an ABI break. The program uses only names both
 * headers define, and only compile-time constants and types, so it is built
 * with plain gcc and linked against no MPI library.
 *
 * Left out: MPICH declares a few constants as extern objects (MPI_UNWEIGHTED,
 * MPI_WEIGHTS_EMPTY, MPI_F_STATUS_IGNORE, MPI_F_STATUSES_IGNORE,
 * MPI_F08_STATUS_IGNORE, ...). None of them is in BCL's subset, and reading
 * them would need MPICH's library, so none is printed.
 *
 * MPI_VERSION and MPI_SUBVERSION are printed but differ on purpose (BCL says
 * 3.1, MPICH 4.0); the script checks them separately.
 */
#include <mpi.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* An integer constant or handle value (handles are ints; some are negative). */
#define VALUE(name) printf("%s %lld\n", #name, (long long)(name))
/* A pointer constant, as an address. */
#define ADDRESS(name) printf("%s %lld\n", #name, (long long)(intptr_t)(name))
/* The size of a type, and whether it is signed. */
#define SIZE(type) printf("sizeof(%s) %zu\n", #type, sizeof(type))
#define SIGNED(type) printf("signed(%s) %d\n", #type, (int)((type)-1 < (type)0))
/* The size of a constant's type (catches a handle defined with the wrong type). */
#define VALUE_SIZE(name) printf("sizeof(%s) %zu\n", #name, sizeof(name))
#define STATUS_FIELD(field) \
    printf("offsetof(MPI_Status,%s) %zu\n", #field, offsetof(MPI_Status, field))

int main(void)
{
    /* Types. */
    SIZE(MPI_Comm);
    SIZE(MPI_Datatype);
    SIZE(MPI_Op);
    SIZE(MPI_Request);
    SIZE(MPI_Errhandler);
    SIZE(MPI_Group);
    SIZE(MPI_Info);
    SIZE(MPI_Aint);
    SIZE(MPI_Offset);
    SIZE(MPI_Count);
    SIZE(MPI_Fint);
    SIZE(MPI_User_function *);
    SIGNED(MPI_Comm);
    SIGNED(MPI_Datatype);
    SIGNED(MPI_Op);
    SIGNED(MPI_Request);
    SIGNED(MPI_Errhandler);
    SIGNED(MPI_Group);
    SIGNED(MPI_Info);
    SIGNED(MPI_Aint);
    SIGNED(MPI_Offset);
    SIGNED(MPI_Count);
    SIGNED(MPI_Fint);

    /* MPI_Status layout. */
    SIZE(MPI_Status);
    STATUS_FIELD(count_lo);
    STATUS_FIELD(count_hi_and_cancelled);
    STATUS_FIELD(MPI_SOURCE);
    STATUS_FIELD(MPI_TAG);
    STATUS_FIELD(MPI_ERROR);

    /* Version. */
    VALUE(MPI_VERSION);
    VALUE(MPI_SUBVERSION);

    /* Null handles. */
    VALUE(MPI_COMM_NULL);
    VALUE(MPI_GROUP_NULL);
    VALUE(MPI_DATATYPE_NULL);
    VALUE(MPI_ERRHANDLER_NULL);
    VALUE(MPI_OP_NULL);
    VALUE(MPI_INFO_NULL);
    VALUE(MPI_REQUEST_NULL);

    /* Communicators and error handlers. */
    VALUE(MPI_COMM_WORLD);
    VALUE(MPI_COMM_SELF);
    VALUE(MPI_ERRORS_ARE_FATAL);
    VALUE(MPI_ERRORS_RETURN);
    VALUE_SIZE(MPI_COMM_WORLD);
    VALUE_SIZE(MPI_ERRORS_RETURN);

    /* Datatypes. */
    VALUE(MPI_CHAR);
    VALUE(MPI_SIGNED_CHAR);
    VALUE(MPI_UNSIGNED_CHAR);
    VALUE(MPI_BYTE);
    VALUE(MPI_WCHAR);
    VALUE(MPI_SHORT);
    VALUE(MPI_UNSIGNED_SHORT);
    VALUE(MPI_INT);
    VALUE(MPI_UNSIGNED);
    VALUE(MPI_LONG);
    VALUE(MPI_UNSIGNED_LONG);
    VALUE(MPI_LONG_LONG_INT);
    VALUE(MPI_LONG_LONG);
    VALUE(MPI_UNSIGNED_LONG_LONG);
    VALUE(MPI_FLOAT);
    VALUE(MPI_DOUBLE);
    VALUE(MPI_LONG_DOUBLE);
    VALUE(MPI_PACKED);
    VALUE(MPI_C_BOOL);
    VALUE(MPI_INT8_T);
    VALUE(MPI_INT16_T);
    VALUE(MPI_INT32_T);
    VALUE(MPI_INT64_T);
    VALUE(MPI_UINT8_T);
    VALUE(MPI_UINT16_T);
    VALUE(MPI_UINT32_T);
    VALUE(MPI_UINT64_T);
    VALUE(MPI_AINT);
    VALUE(MPI_OFFSET);
    VALUE(MPI_COUNT);
    VALUE(MPI_C_COMPLEX);
    VALUE(MPI_C_FLOAT_COMPLEX);
    VALUE(MPI_C_DOUBLE_COMPLEX);
    VALUE(MPI_C_LONG_DOUBLE_COMPLEX);
    VALUE(MPI_FLOAT_INT);
    VALUE(MPI_DOUBLE_INT);
    VALUE(MPI_LONG_INT);
    VALUE(MPI_SHORT_INT);
    VALUE(MPI_2INT);
    VALUE(MPI_LONG_DOUBLE_INT);
    VALUE_SIZE(MPI_INT);
    VALUE_SIZE(MPI_FLOAT_INT);

    /* Reduction operations. */
    VALUE(MPI_MAX);
    VALUE(MPI_MIN);
    VALUE(MPI_SUM);
    VALUE(MPI_PROD);
    VALUE(MPI_LAND);
    VALUE(MPI_BAND);
    VALUE(MPI_LOR);
    VALUE(MPI_BOR);
    VALUE(MPI_LXOR);
    VALUE(MPI_BXOR);
    VALUE(MPI_MINLOC);
    VALUE(MPI_MAXLOC);
    VALUE(MPI_REPLACE);
    VALUE(MPI_NO_OP);
    VALUE_SIZE(MPI_SUM);

    /* Wildcards and special ranks. */
    VALUE(MPI_ANY_SOURCE);
    VALUE(MPI_ANY_TAG);
    VALUE(MPI_PROC_NULL);
    VALUE(MPI_ROOT);
    VALUE(MPI_UNDEFINED);

    /* Special addresses. */
    ADDRESS(MPI_BOTTOM);
    ADDRESS(MPI_IN_PLACE);
    ADDRESS(MPI_STATUS_IGNORE);
    ADDRESS(MPI_STATUSES_IGNORE);

    /* Sizes and lengths. */
    VALUE(MPI_BSEND_OVERHEAD);
    VALUE(MPI_MAX_PROCESSOR_NAME);
    VALUE(MPI_MAX_ERROR_STRING);
    VALUE(MPI_MAX_LIBRARY_VERSION_STRING);

    /* Thread levels, comparison results, attribute keys. */
    VALUE(MPI_THREAD_SINGLE);
    VALUE(MPI_THREAD_FUNNELED);
    VALUE(MPI_THREAD_SERIALIZED);
    VALUE(MPI_THREAD_MULTIPLE);
    VALUE(MPI_IDENT);
    VALUE(MPI_CONGRUENT);
    VALUE(MPI_SIMILAR);
    VALUE(MPI_UNEQUAL);
    VALUE(MPI_TAG_UB);

    /* Error classes. */
    VALUE(MPI_SUCCESS);
    VALUE(MPI_ERR_BUFFER);
    VALUE(MPI_ERR_COUNT);
    VALUE(MPI_ERR_TYPE);
    VALUE(MPI_ERR_TAG);
    VALUE(MPI_ERR_COMM);
    VALUE(MPI_ERR_RANK);
    VALUE(MPI_ERR_ROOT);
    VALUE(MPI_ERR_GROUP);
    VALUE(MPI_ERR_OP);
    VALUE(MPI_ERR_TOPOLOGY);
    VALUE(MPI_ERR_DIMS);
    VALUE(MPI_ERR_ARG);
    VALUE(MPI_ERR_UNKNOWN);
    VALUE(MPI_ERR_TRUNCATE);
    VALUE(MPI_ERR_OTHER);
    VALUE(MPI_ERR_INTERN);
    VALUE(MPI_ERR_IN_STATUS);
    VALUE(MPI_ERR_PENDING);
    VALUE(MPI_ERR_REQUEST);
    VALUE(MPI_ERR_ACCESS);
    VALUE(MPI_ERR_AMODE);
    VALUE(MPI_ERR_BAD_FILE);
    VALUE(MPI_ERR_CONVERSION);
    VALUE(MPI_ERR_DUP_DATAREP);
    VALUE(MPI_ERR_FILE_EXISTS);
    VALUE(MPI_ERR_FILE_IN_USE);
    VALUE(MPI_ERR_FILE);
    VALUE(MPI_ERR_INFO);
    VALUE(MPI_ERR_INFO_KEY);
    VALUE(MPI_ERR_INFO_VALUE);
    VALUE(MPI_ERR_INFO_NOKEY);
    VALUE(MPI_ERR_IO);
    VALUE(MPI_ERR_NAME);
    VALUE(MPI_ERR_NO_MEM);
    VALUE(MPI_ERR_NOT_SAME);
    VALUE(MPI_ERR_NO_SPACE);
    VALUE(MPI_ERR_NO_SUCH_FILE);
    VALUE(MPI_ERR_PORT);
    VALUE(MPI_ERR_QUOTA);
    VALUE(MPI_ERR_READ_ONLY);
    VALUE(MPI_ERR_SERVICE);
    VALUE(MPI_ERR_SPAWN);
    VALUE(MPI_ERR_UNSUPPORTED_DATAREP);
    VALUE(MPI_ERR_UNSUPPORTED_OPERATION);
    VALUE(MPI_ERR_WIN);
    VALUE(MPI_ERR_BASE);
    VALUE(MPI_ERR_LOCKTYPE);
    VALUE(MPI_ERR_KEYVAL);
    VALUE(MPI_ERR_RMA_CONFLICT);
    VALUE(MPI_ERR_RMA_SYNC);
    VALUE(MPI_ERR_SIZE);
    VALUE(MPI_ERR_DISP);
    VALUE(MPI_ERR_ASSERT);
    VALUE(MPI_ERR_RMA_RANGE);
    VALUE(MPI_ERR_RMA_ATTACH);
    VALUE(MPI_ERR_RMA_SHARED);
    VALUE(MPI_ERR_RMA_FLAVOR);
    VALUE(MPI_ERR_LASTCODE);
    VALUE(MPIX_ERR_PROC_FAILED);

    return 0;
}
