/*
 * unsupported.c -- what oxmpi does not implement says so. Any number of
 * ranks from 1.
 *
 * Portable part (every MPI): MPI_Comm_get_parent is MPI_COMM_NULL in a
 * program that was not spawned; MPI_Comm_disconnect frees a duplicate;
 * window keyvals can be created and freed; the file error handler can be
 * set on MPI_FILE_NULL and read back.
 *
 * strict (oxmpi has no windows, files or dynamic processes): under
 * MPI_ERRORS_RETURN, MPI_Win_create, MPI_Win_allocate, MPI_Put on
 * MPI_WIN_NULL, MPI_Comm_spawn, MPI_Open_port and MPI_Comm_connect return a
 * code of class MPI_ERR_UNSUPPORTED_OPERATION whose string names the
 * function; MPI_File_open does too with MPI_COMM_WORLD's handler fatal (file
 * calls report to MPI_FILE_NULL's handler, MPI_ERRORS_RETURN by default);
 * MPI_Win_get_attr and MPI_Win_set_errhandler on MPI_WIN_NULL are
 * MPI_ERR_WIN.
 */
#include "check.h"

/* A call of oxmpi's unsupported chapters: the class, and the function's
 * name in the string. */
static void expect_unsupported(int rc, const char *func)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    CHECK(rc != MPI_SUCCESS && check_class(rc) == MPI_ERR_UNSUPPORTED_OPERATION,
          "%s returned %d (class %d)", func, rc, check_class(rc));
    MPI_CHECK(MPI_Error_string(rc, msg, &len));
    CHECK(strstr(msg, func) != NULL, "the string of %s's error does not name it: '%s'", func, msg);
}

int main(int argc, char **argv)
{
    MPI_Comm parent, dup;
    MPI_Init(&argc, &argv);

    MPI_CHECK(MPI_Comm_get_parent(&parent));
    CHECK(parent == MPI_COMM_NULL, "Comm_get_parent of a program not spawned");
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    MPI_CHECK(MPI_Comm_disconnect(&dup));
    CHECK(dup == MPI_COMM_NULL, "Comm_disconnect did not null the handle");
    {
        int wk;
        MPI_CHECK(MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, MPI_WIN_NULL_DELETE_FN, &wk, NULL));
        MPI_CHECK(MPI_Win_free_keyval(&wk));
        CHECK(wk == MPI_KEYVAL_INVALID, "Win_free_keyval left %d", wk);
    }
    {
        MPI_Errhandler eh;
        MPI_CHECK(MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN));
        MPI_CHECK(MPI_File_get_errhandler(MPI_FILE_NULL, &eh));
        CHECK(eh == MPI_ERRORS_RETURN, "MPI_FILE_NULL's handler is not MPI_ERRORS_RETURN");
    }

    if (strict_mode()) {
        MPI_File fh;
        /* MPI_COMM_WORLD's handler is still fatal: file calls use
         * MPI_FILE_NULL's. */
        expect_unsupported(MPI_File_open(MPI_COMM_WORLD, "x", MPI_MODE_RDONLY, MPI_INFO_NULL, &fh),
                           "MPI_File_open");

        test_errors_return();
        MPI_Win win;
        void *base = NULL;
        int buf[4] = {0}, x = 1;
        expect_unsupported(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL,
                                          MPI_COMM_WORLD, &win),
                           "MPI_Win_create");
        expect_unsupported(MPI_Win_allocate(64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win),
                           "MPI_Win_allocate");
        expect_unsupported(MPI_Put(&x, 1, MPI_INT, 0, 0, 1, MPI_INT, MPI_WIN_NULL), "MPI_Put");
        expect_unsupported(MPI_Win_fence(0, MPI_WIN_NULL), "MPI_Win_fence");
        {
            MPI_Comm inter;
            char port[MPI_MAX_PORT_NAME];
            int errs[1];
            expect_unsupported(MPI_Comm_spawn("true", MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0,
                                              MPI_COMM_SELF, &inter, errs),
                               "MPI_Comm_spawn");
            expect_unsupported(MPI_Open_port(MPI_INFO_NULL, port), "MPI_Open_port");
            expect_unsupported(MPI_Comm_connect("port", MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter),
                               "MPI_Comm_connect");
        }
        {
            int flag;
            void *v;
            CHECK_CLASS(MPI_Win_get_attr(MPI_WIN_NULL, MPI_WIN_BASE, &v, &flag), MPI_ERR_WIN);
            CHECK_CLASS(MPI_Win_set_errhandler(MPI_WIN_NULL, MPI_ERRORS_RETURN), MPI_ERR_WIN);
        }
    }

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    test_ok("unsupported");
    MPI_Finalize();
    return 0;
}
