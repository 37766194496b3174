/* Prints the standard ABI's constants, one per line: compiled once with
 * oxmpi's mpi.h and once with another implementation's standard-ABI header,
 * the two outputs must be identical (tests/abi_compat.rs). */
#include <mpi.h>
#include <stdio.h>
#include <stdint.h>
#define P(x) printf("%s %lld\n", #x, (long long)(intptr_t)(x));
int main(void){
P(MPI_COMM_WORLD) P(MPI_COMM_SELF) P(MPI_INT) P(MPI_CHARACTER) P(MPI_DOUBLE) P(MPI_CHAR) P(MPI_BYTE) P(MPI_2INT) P(MPI_DOUBLE_INT) P(MPI_SUM) P(MPI_MAXLOC) P(MPI_REQUEST_NULL) P(MPI_ERRORS_RETURN) P(MPI_ANY_SOURCE) P(MPI_ANY_TAG) P(MPI_PROC_NULL) P(MPI_UNDEFINED) P(MPI_TAG_UB) P(MPI_UNIVERSE_SIZE) P(MPI_APPNUM) P(MPI_THREAD_MULTIPLE) P(MPI_ERR_TRUNCATE) P(MPI_ERR_IN_STATUS) P(MPI_ERR_PENDING) P(MPI_IDENT) P(MPI_CONGRUENT) P(MPI_SIMILAR) P(MPI_UNEQUAL) P(MPI_COMBINER_STRUCT) P(MPI_ORDER_C) P(MPI_ORDER_FORTRAN) P(MPI_COMM_TYPE_SHARED) P(MPI_BSEND_OVERHEAD) P(MPI_MAX_PROCESSOR_NAME) P(MPI_IN_PLACE) P(MPI_STATUS_IGNORE) P(MPI_GROUP_EMPTY) P(MPI_MESSAGE_NO_PROC) P(MPI_LONG_DOUBLE) P(MPI_C_BOOL) P(MPI_WCHAR) P(MPI_AINT) P(MPI_COUNT) P(MPI_ABI_VERSION) P(sizeof(MPI_Status))
return 0;}
