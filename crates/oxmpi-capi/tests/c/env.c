/*
 * env.c -- environment, version, attribute, error-string and handle
 * conversion calls.
 *
 * Ranks: any number from 1 to 8 (minimum 1; the suite runs it with 2..8).
 *
 * Checks: Initialized/Finalized before, during and after MPI; Get_version and
 * Get_library_version before MPI_Init; Init_thread asking for
 * MPI_THREAD_MULTIPLE (any `provided` is accepted) with Query_thread equal to
 * it; Is_thread_main; Wtime monotone and advancing, Wtick > 0; Get_version
 * equal to MPI_VERSION/MPI_SUBVERSION of the header (5.0 for oxmpi);
 * Get_library_version and Get_processor_name non-empty and NUL-terminated at
 * resultlen; Alloc_mem/Free_mem; the TAG_UB (>= 32767), UNIVERSE_SIZE,
 * APPNUM and WTIME_IS_GLOBAL attributes of MPI_COMM_WORLD; Error_class maps
 * each standard class to itself and Error_string gives a non-empty string;
 * Comm_set_errhandler(MPI_ERRORS_RETURN) then Comm_get_errhandler gives it
 * back; Errhandler_free(MPI_ERRHANDLER_NULL) fails; Comm_get_name on the
 * predefined communicators; the MPI_LASTUSEDCODE attribute (>=
 * MPI_ERR_LASTCODE); Comm_get_attr(MPI_KEYVAL_INVALID) is MPI_ERR_KEYVAL.
 * MPI >= 5 only: Abi_get_version, and <Handle>_toint/_fromint round trips for
 * every handle kind (predefined, null and user-created handles); with the
 * standard ABI header (MPI_ABI_VERSION defined) the integer of a predefined
 * handle must equal the handle's ABI value.
 */
#include "check.h"

static int is_thread_level(int p)
{
    return p == MPI_THREAD_SINGLE || p == MPI_THREAD_FUNNELED ||
           p == MPI_THREAD_SERIALIZED || p == MPI_THREAD_MULTIPLE;
}

static void check_string(const char *s, int len, int max, const char *what)
{
    CHECK(len > 0, "%s: resultlen %d", what, len);
    CHECK(len <= max - 1, "%s: resultlen %d > %d", what, len, max - 1);
    /* Open MPI 5.0 counts the terminating NUL of the library version. */
    CHECK((int)strlen(s) == len || (lenient_mpi() && (int)strlen(s) + 1 == len),
          "%s: strlen %d != resultlen %d", what, (int)strlen(s), len);
}

#if MPI_VERSION >= 5
#define ROUND_TRIP(kind, h)                                                        \
    do {                                                                           \
        int i_ = MPI_##kind##_toint(h);                                            \
        CHECK(MPI_##kind##_fromint(i_) == (h), "MPI_" #kind "_fromint(toint(%s))" \
              " != %s (int %d)", #h, #h, i_);                                      \
    } while (0)
#if defined(MPI_ABI_VERSION)
/* Standard ABI: the Fortran integer of a predefined handle is its ABI value. */
#define ABI_VALUE(kind, h)                                                         \
    do {                                                                           \
        int i_ = MPI_##kind##_toint(h);                                            \
        CHECK(i_ == (int)(intptr_t)(h), "MPI_" #kind "_toint(%s) = %d, ABI value " \
              "%d", #h, i_, (int)(intptr_t)(h));                                   \
        CHECK(MPI_##kind##_fromint((int)(intptr_t)(h)) == (h),                     \
              "MPI_" #kind "_fromint(ABI value of %s)", #h);                       \
    } while (0)
#else
#define ABI_VALUE(kind, h) ROUND_TRIP(kind, h)
#endif

static void handle_conversions(void)
{
    MPI_Comm dup;
    MPI_Group g;
    MPI_Datatype t;
    int i;

    ROUND_TRIP(Comm, MPI_COMM_WORLD);
    ROUND_TRIP(Comm, MPI_COMM_SELF);
    ROUND_TRIP(Comm, MPI_COMM_NULL);
    ABI_VALUE(Comm, MPI_COMM_WORLD);
    ABI_VALUE(Comm, MPI_COMM_SELF);
    ABI_VALUE(Comm, MPI_COMM_NULL);
    CHECK(MPI_Comm_toint(MPI_COMM_WORLD) != MPI_Comm_toint(MPI_COMM_SELF),
          "COMM_WORLD and COMM_SELF convert to the same integer");

    ROUND_TRIP(Group, MPI_GROUP_EMPTY);
    ROUND_TRIP(Group, MPI_GROUP_NULL);
    ABI_VALUE(Group, MPI_GROUP_EMPTY);
    ABI_VALUE(Group, MPI_GROUP_NULL);
    ROUND_TRIP(Type, MPI_INT);
    ROUND_TRIP(Type, MPI_DOUBLE);
    ROUND_TRIP(Type, MPI_BYTE);
    ROUND_TRIP(Type, MPI_DATATYPE_NULL);
    ABI_VALUE(Type, MPI_INT);
    ABI_VALUE(Type, MPI_DOUBLE);
    ABI_VALUE(Type, MPI_DATATYPE_NULL);
    ROUND_TRIP(Op, MPI_SUM);
    ROUND_TRIP(Op, MPI_MAXLOC);
    ROUND_TRIP(Op, MPI_OP_NULL);
    ABI_VALUE(Op, MPI_SUM);
    ABI_VALUE(Op, MPI_OP_NULL);
    ROUND_TRIP(Errhandler, MPI_ERRORS_RETURN);
    ROUND_TRIP(Errhandler, MPI_ERRORS_ARE_FATAL);
    ROUND_TRIP(Errhandler, MPI_ERRHANDLER_NULL);
    ABI_VALUE(Errhandler, MPI_ERRORS_RETURN);
    ROUND_TRIP(Info, MPI_INFO_NULL);
    ROUND_TRIP(Info, MPI_INFO_ENV);
    ABI_VALUE(Info, MPI_INFO_NULL);
    ROUND_TRIP(Request, MPI_REQUEST_NULL);
    ABI_VALUE(Request, MPI_REQUEST_NULL);
    ROUND_TRIP(Message, MPI_MESSAGE_NULL);
    ROUND_TRIP(Message, MPI_MESSAGE_NO_PROC);
    ABI_VALUE(Message, MPI_MESSAGE_NO_PROC);
    ROUND_TRIP(Win, MPI_WIN_NULL);
    ROUND_TRIP(File, MPI_FILE_NULL);
    ROUND_TRIP(Session, MPI_SESSION_NULL);

    /* user-created handles */
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    ROUND_TRIP(Comm, dup);
    CHECK(MPI_Comm_toint(dup) != MPI_Comm_toint(MPI_COMM_WORLD), "dup converts like WORLD");
    MPI_CHECK(MPI_Comm_group(dup, &g));
    ROUND_TRIP(Group, g);
    MPI_CHECK(MPI_Type_vector(2, 1, 3, MPI_INT, &t));
    ROUND_TRIP(Type, t);
    /* a converted handle is usable */
    {
        int sz = 0;
        MPI_Comm back = MPI_Comm_fromint(MPI_Comm_toint(dup));
        MPI_CHECK(MPI_Comm_size(back, &sz));
        MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &i));
        CHECK(sz == i, "size through converted handle %d != %d", sz, i);
    }
    MPI_CHECK(MPI_Type_free(&t));
    MPI_CHECK(MPI_Group_free(&g));
    MPI_CHECK(MPI_Comm_free(&dup));
}
#endif

int main(int argc, char **argv)
{
    int flag, provided = -1, q = -1, rank, size, v = -1, sv = -1, len;
    char buf[MPI_MAX_LIBRARY_VERSION_STRING];
    double t0, t1, tick;
    int *ip;
    void *attr;

    /* before MPI_Init */
    flag = -1;
    MPI_Initialized(&flag);
    CHECK(flag == 0, "MPI_Initialized before init = %d", flag);
    flag = -1;
    MPI_Finalized(&flag);
    CHECK(flag == 0, "MPI_Finalized before init = %d", flag);
    MPI_Get_version(&v, &sv);
    CHECK(v == MPI_VERSION && sv == MPI_SUBVERSION,
          "MPI_Get_version before init = %d.%d, header says %d.%d", v, sv, MPI_VERSION,
          MPI_SUBVERSION);
    len = -1;
    MPI_Get_library_version(buf, &len);
    check_string(buf, len, MPI_MAX_LIBRARY_VERSION_STRING, "Get_library_version before init");

    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    test_errors_return();
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(is_thread_level(provided), "provided = %d is not a thread level", provided);
    MPI_CHECK(MPI_Query_thread(&q));
    CHECK(q == provided, "Query_thread %d != provided %d", q, provided);
    flag = -1;
    MPI_CHECK(MPI_Is_thread_main(&flag));
    CHECK(flag == 1, "Is_thread_main = %d on the main thread", flag);

    flag = -1;
    MPI_CHECK(MPI_Initialized(&flag));
    CHECK(flag == 1, "MPI_Initialized after init = %d", flag);
    flag = -1;
    MPI_CHECK(MPI_Finalized(&flag));
    CHECK(flag == 0, "MPI_Finalized after init = %d", flag);

    /* clocks */
    tick = MPI_Wtick();
    CHECK(tick > 0.0 && tick < 1.0, "Wtick = %g", tick);
    t0 = MPI_Wtime();
    {
        double prev = t0;
        int i;
        for (i = 0; i < 10000; i++) {
            double t = MPI_Wtime();
            CHECK(t >= prev, "Wtime went backwards: %.9f after %.9f", t, prev);
            prev = t;
        }
    }
    sleep_ms(20);
    t1 = MPI_Wtime();
    CHECK(t1 - t0 >= 0.015, "Wtime advanced %g s over a 20 ms sleep", t1 - t0);
    CHECK(t1 - t0 < 100.0, "Wtime advanced %g s over a 20 ms sleep", t1 - t0);

    /* versions and names */
    MPI_CHECK(MPI_Get_version(&v, &sv));
    CHECK(v == MPI_VERSION && sv == MPI_SUBVERSION, "MPI_Get_version = %d.%d, header says %d.%d",
          v, sv, MPI_VERSION, MPI_SUBVERSION);
#if MPI_VERSION >= 5 || (MPI_VERSION == 4 && MPI_SUBVERSION >= 1)
    {
        /* MPI 4.1: a new info object describing the hardware */
        MPI_Info hw;
        int nkeys;
        MPI_CHECK(MPI_Get_hw_resource_info(&hw));
        CHECK(hw != MPI_INFO_NULL, "MPI_Get_hw_resource_info gave MPI_INFO_NULL");
        MPI_CHECK(MPI_Info_get_nkeys(hw, &nkeys));
        CHECK(nkeys >= 0, "hw info has %d keys", nkeys);
        MPI_CHECK(MPI_Info_free(&hw));
    }
#endif
#if MPI_VERSION >= 5
    {
        /* MPI 5.0: the ABI's integer sizes */
        MPI_Info abi;
        char val[32];
        int flag, vlen = (int)sizeof val;
        MPI_CHECK(MPI_Abi_get_info(&abi));
        CHECK(abi != MPI_INFO_NULL, "MPI_Abi_get_info gave MPI_INFO_NULL");
        MPI_CHECK(MPI_Info_get_string(abi, "mpi_aint_size", &vlen, val, &flag));
        CHECK(flag && atoi(val) == (int)sizeof(MPI_Aint), "mpi_aint_size '%s'", flag ? val : "");
        vlen = (int)sizeof val;
        MPI_CHECK(MPI_Info_get_string(abi, "mpi_count_size", &vlen, val, &flag));
        CHECK(flag && atoi(val) == (int)sizeof(MPI_Count), "mpi_count_size '%s'", flag ? val : "");
        MPI_CHECK(MPI_Info_free(&abi));
    }
#endif
    len = -1;
    MPI_CHECK(MPI_Get_library_version(buf, &len));
    check_string(buf, len, MPI_MAX_LIBRARY_VERSION_STRING, "Get_library_version");
    {
        char name[MPI_MAX_PROCESSOR_NAME];
        len = -1;
        MPI_CHECK(MPI_Get_processor_name(name, &len));
        check_string(name, len, MPI_MAX_PROCESSOR_NAME, "Get_processor_name");
    }
    {
        char name[MPI_MAX_OBJECT_NAME];
        len = -1;
        MPI_CHECK(MPI_Comm_get_name(MPI_COMM_WORLD, name, &len));
        CHECK(strcmp(name, "MPI_COMM_WORLD") == 0 && len == 14, "WORLD name '%s' len %d", name,
              len);
        MPI_CHECK(MPI_Comm_get_name(MPI_COMM_SELF, name, &len));
        CHECK(strcmp(name, "MPI_COMM_SELF") == 0 && len == 13, "SELF name '%s' len %d", name,
              len);
        if (strict_mode()) {
            len = -1;
            MPI_CHECK(MPI_Comm_get_name(MPI_COMM_NULL, name, &len));
            CHECK(strcmp(name, "MPI_COMM_NULL") == 0 && len == 13, "COMM_NULL name '%s' len %d",
                  name, len);
        }
    }

    /* Alloc_mem / Free_mem */
    {
        unsigned char *mem = NULL;
        size_t n = 1 << 20, i;
        MPI_CHECK(MPI_Alloc_mem((MPI_Aint)n, MPI_INFO_NULL, &mem));
        CHECK(mem != NULL, "Alloc_mem gave NULL");
        for (i = 0; i < n; i++)
            mem[i] = (unsigned char)i;
        for (i = 0; i < n; i += 4093)
            CHECK(mem[i] == (unsigned char)i, "Alloc_mem memory not retained at %zu", i);
        MPI_CHECK(MPI_Free_mem(mem));
        mem = NULL;
        MPI_CHECK(MPI_Alloc_mem(64, MPI_INFO_NULL, &mem));
        CHECK(mem != NULL, "Alloc_mem(64) gave NULL");
        memset(mem, 0x5a, 64);
        MPI_CHECK(MPI_Free_mem(mem));
    }

    /* predefined attributes */
    flag = 0;
    attr = NULL;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &flag));
    CHECK(flag && attr != NULL, "TAG_UB attribute not set (flag %d)", flag);
    ip = (int *)attr;
    CHECK(*ip >= 32767, "TAG_UB = %d < 32767", *ip);
    flag = 0;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &attr, &flag));
    if (flag) {
        ip = (int *)attr;
        CHECK(attr != NULL && *ip >= 1, "UNIVERSE_SIZE = %d", attr ? *ip : -1);
    }
    flag = 0;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &attr, &flag));
    if (flag) {
        ip = (int *)attr;
        CHECK(attr != NULL && *ip >= 0, "APPNUM = %d", attr ? *ip : -1);
    }
    flag = 0;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &attr, &flag));
    if (flag) {
        ip = (int *)attr;
        CHECK(attr != NULL && (*ip == 0 || *ip == 1), "WTIME_IS_GLOBAL = %d", attr ? *ip : -1);
    }

    /* MPI_LASTUSEDCODE: the largest error code in use, MPI_ERR_LASTCODE at
     * least */
    flag = 0;
    attr = NULL;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &attr, &flag));
    CHECK(flag && attr != NULL, "LASTUSEDCODE attribute not set (flag %d)", flag);
    ip = (int *)attr;
    CHECK(*ip >= MPI_ERR_LASTCODE, "LASTUSEDCODE = %d < MPI_ERR_LASTCODE = %d", *ip,
          MPI_ERR_LASTCODE);
    /* MPI_KEYVAL_INVALID is no key; nor is a key nobody created (strict:
     * MPI_ERR_KEYVAL as in MPICH; Open MPI says MPI_ERR_OTHER) */
    flag = -1;
    CHECK_CLASS(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_KEYVAL_INVALID, &attr, &flag), MPI_ERR_KEYVAL);
    if (strict_mode())
        CHECK_CLASS(MPI_Comm_get_attr(MPI_COMM_WORLD, 12345, &attr, &flag), MPI_ERR_KEYVAL);

    /* error classes and strings */
    {
        static const int classes[] = {
            MPI_SUCCESS,      MPI_ERR_BUFFER,  MPI_ERR_COUNT,     MPI_ERR_TYPE,
            MPI_ERR_TAG,      MPI_ERR_COMM,    MPI_ERR_RANK,      MPI_ERR_REQUEST,
            MPI_ERR_ROOT,     MPI_ERR_GROUP,   MPI_ERR_OP,        MPI_ERR_ARG,
            MPI_ERR_UNKNOWN,  MPI_ERR_TRUNCATE, MPI_ERR_OTHER,    MPI_ERR_INTERN,
            MPI_ERR_PENDING,  MPI_ERR_IN_STATUS, MPI_ERR_NO_MEM,  MPI_ERR_KEYVAL,
        };
        char s[MPI_MAX_ERROR_STRING], s_ok[MPI_MAX_ERROR_STRING];
        size_t k;
        for (k = 0; k < sizeof classes / sizeof classes[0]; k++) {
            int cls = -1;
            MPI_CHECK(MPI_Error_class(classes[k], &cls));
            CHECK(cls == classes[k], "Error_class(%d) = %d", classes[k], cls);
            len = -1;
            s[0] = '\0';
            MPI_CHECK(MPI_Error_string(classes[k], s, &len));
            check_string(s, len, MPI_MAX_ERROR_STRING, "Error_string");
        }
        CHECK(MPI_ERR_LASTCODE > MPI_ERR_IN_STATUS, "MPI_ERR_LASTCODE = %d", MPI_ERR_LASTCODE);
        MPI_CHECK(MPI_Error_string(MPI_SUCCESS, s_ok, &len));
        MPI_CHECK(MPI_Error_string(MPI_ERR_TRUNCATE, s, &len));
        CHECK(strcmp(s, s_ok) != 0, "same string for MPI_SUCCESS and MPI_ERR_TRUNCATE: '%s'", s);
    }

    /* error handlers */
    {
        MPI_Errhandler eh = MPI_ERRHANDLER_NULL;
        MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        MPI_CHECK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh));
        CHECK(eh == MPI_ERRORS_RETURN, "Comm_get_errhandler did not give MPI_ERRORS_RETURN");
        MPI_CHECK(MPI_Errhandler_free(&eh));
        CHECK(eh == MPI_ERRHANDLER_NULL, "Errhandler_free did not null the handle");
        /* still in force after freeing the reference */
        MPI_CHECK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh));
        CHECK(eh == MPI_ERRORS_RETURN, "errhandler lost after Errhandler_free of a reference");
        MPI_CHECK(MPI_Errhandler_free(&eh));
        MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL));
        MPI_CHECK(MPI_Comm_get_errhandler(MPI_COMM_SELF, &eh));
        CHECK(eh == MPI_ERRORS_ARE_FATAL, "COMM_SELF errhandler not ERRORS_ARE_FATAL");
        MPI_CHECK(MPI_Errhandler_free(&eh));
        MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
        /* MPI_ERRHANDLER_NULL is no error handler (strict: the class is
         * MPI_ERR_ERRHANDLER as in MPICH; Open MPI says MPI_ERR_ARG) */
        eh = MPI_ERRHANDLER_NULL;
#if MPI_VERSION >= 5 || defined(MPI_ERR_ERRHANDLER)
        if (strict_mode()) {
            CHECK_CLASS(MPI_Errhandler_free(&eh), MPI_ERR_ERRHANDLER);
            eh = MPI_ERRHANDLER_NULL;
        }
#endif
        {
            int rc = MPI_Errhandler_free(&eh);
            CHECK(rc != MPI_SUCCESS, "Errhandler_free(MPI_ERRHANDLER_NULL) succeeded");
        }
    }

#if MPI_VERSION >= 5
    {
        int major = -2, minor = -2;
        MPI_CHECK(MPI_Abi_get_version(&major, &minor));
#if defined(MPI_ABI_VERSION)
        CHECK(major == MPI_ABI_VERSION && minor >= 0,
              "Abi_get_version = %d.%d, header MPI_ABI_VERSION %d.%d", major, minor,
              MPI_ABI_VERSION, MPI_ABI_SUBVERSION);
#else
        /* native (non-standard-ABI) build: -1.-1 means "no standard ABI" */
        CHECK((major == -1 && minor == -1) || (major >= 1 && minor >= 0),
              "Abi_get_version = %d.%d", major, minor);
#endif
    }
    handle_conversions();
#endif

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Finalize());

    flag = -1;
    MPI_Finalized(&flag);
    CHECK(flag == 1, "MPI_Finalized after finalize = %d", flag);
    flag = -1;
    MPI_Initialized(&flag);
    CHECK(flag == 1, "MPI_Initialized after finalize = %d", flag);
    v = sv = -1;
    MPI_Get_version(&v, &sv);
    CHECK(v == MPI_VERSION && sv == MPI_SUBVERSION, "MPI_Get_version after finalize = %d.%d",
          v, sv);
    (void)size;
    test_ok_rank(rank, "env");
    return 0;
}
