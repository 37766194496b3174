/*
 * info.c -- info objects and communicator hints. Any number of ranks from 1.
 *
 *  - Info_create/set/get_nkeys/get_nthkey (every key once), replacing a
 *    value keeps the count, Info_get and Info_get_valuelen (strict: Info_get
 *    cuts a value longer than valuelen), Info_delete,
 *    deleting a key not set is MPI_ERR_INFO_NOKEY, Info_dup is independent,
 *    Info_free nulls the handle; a key of MPI_MAX_INFO_KEY characters is
 *    MPI_ERR_INFO_KEY, a value of MPI_MAX_INFO_VAL characters
 *    MPI_ERR_INFO_VALUE; a key not set gives flag 0.
 *  - MPI 4: Info_get_string (cut to the buffer, the length with the NUL
 *    given back, buflen 0 asks for the length), Info_create_env;
 *    Comm_split_type(MPI_COMM_TYPE_HW_GUIDED) with mpi_hw_resource_type =
 *    mpi_shared_memory is congruent with MPI_COMM_TYPE_SHARED's.
 *  - MPI_INFO_ENV can be read and duplicated.
 *  - Comm_set_info / Comm_get_info give a valid info object (strict: the
 *    hint set is given back, and by a duplicate too).
 *  - strict: MPI_INFO_ENV's "command" is this program.
 */
#include "check.h"

#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif

/* The value of `key` in `info` (flag 0: "" returned). */
static const char *value_of(MPI_Info info, const char *key, int *flag)
{
    static char v[MPI_MAX_INFO_VAL + 1];
    v[0] = '\0';
    MPI_CHECK(MPI_Info_get(info, key, MPI_MAX_INFO_VAL, v, flag));
    return v;
}

int main(int argc, char **argv)
{
    int n, flag, len;
    char key[MPI_MAX_INFO_KEY + 1];
    MPI_Info info, dup;
    MPI_Init(&argc, &argv);
    test_errors_return();

    MPI_CHECK(MPI_Info_create(&info));
    MPI_CHECK(MPI_Info_get_nkeys(info, &n));
    CHECK(n == 0, "a new info has %d keys", n);
    MPI_CHECK(MPI_Info_set(info, "alpha", "1"));
    MPI_CHECK(MPI_Info_set(info, "beta", "two words"));
    MPI_CHECK(MPI_Info_set(info, "gamma", "3"));
    MPI_CHECK(MPI_Info_set(info, "alpha", "one"));
    MPI_CHECK(MPI_Info_get_nkeys(info, &n));
    CHECK(n == 3, "%d keys after setting 3 (one twice)", n);
    {
        int seen = 0;
        for (int i = 0; i < n; i++) {
            MPI_CHECK(MPI_Info_get_nthkey(info, i, key));
            if (strcmp(key, "alpha") == 0)
                seen |= 1;
            else if (strcmp(key, "beta") == 0)
                seen |= 2;
            else if (strcmp(key, "gamma") == 0)
                seen |= 4;
            else
                CHECK(0, "unexpected key %s", key);
        }
        CHECK(seen == 7, "keys seen: %d", seen);
    }
    CHECK(strcmp(value_of(info, "alpha", &flag), "one") == 0 && flag, "alpha = '%s'",
          value_of(info, "alpha", &flag));
    CHECK(strcmp(value_of(info, "beta", &flag), "two words") == 0 && flag, "beta");
    value_of(info, "delta", &flag);
    CHECK(!flag, "a key not set was found");
    MPI_CHECK(MPI_Info_get_valuelen(info, "beta", &len, &flag));
    CHECK(flag && len == 9, "valuelen of beta: %d (flag %d)", len, flag);
    if (strict_mode()) {
        /* Info_get cuts the value to valuelen characters (MPICH 5 fails
         * with "Value is too long" instead). */
        char v[4];
        MPI_CHECK(MPI_Info_get(info, "beta", 3, v, &flag));
        CHECK(flag && strcmp(v, "two") == 0, "cut value '%s'", v);
    }

    MPI_CHECK(MPI_Info_dup(info, &dup));
    MPI_CHECK(MPI_Info_delete(info, "gamma"));
    MPI_CHECK(MPI_Info_get_nkeys(info, &n));
    CHECK(n == 2, "%d keys after a delete", n);
    CHECK_CLASS(MPI_Info_delete(info, "gamma"), MPI_ERR_INFO_NOKEY);
    MPI_CHECK(MPI_Info_get_nkeys(dup, &n));
    CHECK(n == 3, "the dup has %d keys", n);
    CHECK(strcmp(value_of(dup, "gamma", &flag), "3") == 0 && flag, "the dup lost gamma");
    MPI_CHECK(MPI_Info_set(dup, "alpha", "changed"));
    CHECK(strcmp(value_of(info, "alpha", &flag), "one") == 0, "the dup shares values");

    {
        /* One more than MPI_MAX_INFO_KEY (MPI_MAX_INFO_VAL) characters:
         * too long whether or not the maximum counts the NUL. */
        char longkey[MPI_MAX_INFO_KEY + 2];
        static char longval[MPI_MAX_INFO_VAL + 2];
        memset(longkey, 'k', MPI_MAX_INFO_KEY + 1);
        longkey[MPI_MAX_INFO_KEY + 1] = '\0';
        memset(longval, 'v', MPI_MAX_INFO_VAL + 1);
        longval[MPI_MAX_INFO_VAL + 1] = '\0';
        CHECK_CLASS(MPI_Info_set(info, longkey, "x"), MPI_ERR_INFO_KEY);
        CHECK_CLASS(MPI_Info_set(info, "k", longval), MPI_ERR_INFO_VALUE);
    }

#if MPI_VERSION >= 4
    {
        char v[8];
        int buflen = 0;
        MPI_CHECK(MPI_Info_get_string(info, "beta", &buflen, v, &flag));
        CHECK(flag && buflen == 10, "get_string length query: flag %d buflen %d", flag, buflen);
        buflen = 4;
        MPI_CHECK(MPI_Info_get_string(info, "beta", &buflen, v, &flag));
        CHECK(flag && buflen == 10 && strcmp(v, "two") == 0, "cut get_string: '%s' buflen %d", v,
              buflen);
        buflen = sizeof v;
        MPI_CHECK(MPI_Info_get_string(info, "alpha", &buflen, v, &flag));
        CHECK(flag && buflen == 4 && strcmp(v, "one") == 0, "get_string: '%s' buflen %d", v, buflen);
        buflen = sizeof v;
        MPI_CHECK(MPI_Info_get_string(info, "nope", &buflen, v, &flag));
        CHECK(!flag, "get_string of a key not set");

        MPI_Info env;
        char *args[] = {"prog", "-x", NULL};
        MPI_CHECK(MPI_Info_create_env(2, args, &env));
        MPI_CHECK(MPI_Info_get_nkeys(env, &n));
        CHECK(n >= 0, "create_env: %d keys", n);
        MPI_CHECK(MPI_Info_free(&env));
    }
#endif

    MPI_CHECK(MPI_Info_free(&dup));
    CHECK(dup == MPI_INFO_NULL, "Info_free did not null the handle");
    MPI_CHECK(MPI_Info_free(&info));

    /* MPI_INFO_ENV. */
    MPI_CHECK(MPI_Info_get_nkeys(MPI_INFO_ENV, &n));
    for (int i = 0; i < n; i++)
        MPI_CHECK(MPI_Info_get_nthkey(MPI_INFO_ENV, i, key));
    MPI_CHECK(MPI_Info_dup(MPI_INFO_ENV, &dup));
    MPI_CHECK(MPI_Info_free(&dup));
    if (strict_mode()) {
        const char *cmd = value_of(MPI_INFO_ENV, "command", &flag);
        CHECK(flag && strstr(cmd, "info") != NULL, "MPI_INFO_ENV command '%s'", cmd);
    }

    /* Communicator hints. */
    {
        MPI_Comm c, d;
        MPI_Info used;
        MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
        MPI_CHECK(MPI_Info_create(&info));
        MPI_CHECK(MPI_Info_set(info, "mpi_assert_no_any_tag", "true"));
        MPI_CHECK(MPI_Comm_set_info(c, info));
        MPI_CHECK(MPI_Info_free(&info));
        MPI_CHECK(MPI_Comm_get_info(c, &used));
        CHECK(used != MPI_INFO_NULL, "Comm_get_info gave MPI_INFO_NULL");
        MPI_CHECK(MPI_Info_get_nkeys(used, &n));
        if (strict_mode()) {
            CHECK(strcmp(value_of(used, "mpi_assert_no_any_tag", &flag), "true") == 0 && flag,
                  "the hint is not given back");
        }
        MPI_CHECK(MPI_Info_free(&used));
        MPI_CHECK(MPI_Comm_dup(c, &d));
        MPI_CHECK(MPI_Comm_get_info(d, &used));
        if (strict_mode())
            CHECK(strcmp(value_of(used, "mpi_assert_no_any_tag", &flag), "true") == 0 && flag,
                  "the duplicate lost the hint");
        MPI_CHECK(MPI_Info_free(&used));
        MPI_CHECK(MPI_Comm_free(&d));
        MPI_CHECK(MPI_Comm_free(&c));
    }

#if MPI_VERSION >= 4
    /* The reserved hardware resource type: as MPI_COMM_TYPE_SHARED. */
    {
        MPI_Comm hw, shm;
        int a, b, r;
        MPI_CHECK(MPI_Info_create(&info));
        MPI_CHECK(MPI_Info_set(info, "mpi_hw_resource_type", "mpi_shared_memory"));
        MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, 0, info, &hw));
        MPI_CHECK(MPI_Info_free(&info));
        MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shm));
        CHECK(hw != MPI_COMM_NULL, "HW_GUIDED with mpi_shared_memory gave MPI_COMM_NULL");
        MPI_CHECK(MPI_Comm_compare(hw, shm, &r));
        MPI_CHECK(MPI_Comm_size(hw, &a));
        MPI_CHECK(MPI_Comm_size(shm, &b));
        CHECK(r == MPI_CONGRUENT && a == b, "HW_GUIDED mpi_shared_memory: compare %d, sizes %d %d", r,
              a, b);
        MPI_CHECK(MPI_Comm_free(&hw));
        MPI_CHECK(MPI_Comm_free(&shm));
    }
#endif

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    test_ok("info");
    MPI_Finalize();
    return 0;
}
