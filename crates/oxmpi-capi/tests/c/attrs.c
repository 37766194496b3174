/*
 * attrs.c -- keyvals and attributes on communicators and datatypes.
 * Any number of ranks from 1.
 *
 *  - MPI_Comm_create_keyval with copy and delete callbacks: set, get
 *    (the pointer given back), replace (the old value's delete callback
 *    runs), MPI_Comm_dup copies through the copy callback (its new value
 *    on the duplicate, the extra state passed), MPI_Comm_delete_attr and
 *    MPI_Comm_free run the delete callback with the right value and
 *    communicator; a key nobody set gives flag 0.
 *  - MPI_COMM_NULL_COPY_FN (not copied) and MPI_COMM_DUP_FN (copied as
 *    is); a keyval freed while a value uses it: the value's delete
 *    callback still runs when the communicator is freed.
 *  - The MPI-1 names: MPI_Keyval_create, MPI_Attr_put, MPI_Attr_get,
 *    MPI_Attr_delete, MPI_Keyval_free.
 *  - Datatypes: MPI_Type_create_keyval, set/get/delete, MPI_Type_dup copies,
 *    MPI_Type_free deletes.
 *  - MPI_Finalize deletes the attributes of MPI_COMM_SELF (both callbacks
 *    run, the one set last first).
 */
#include "check.h"

#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif

static int copies, deletes, last_deleted;
static MPI_Comm last_comm;
static int extra_seen;

static int copy_plus_one(MPI_Comm comm, int keyval, void *extra, void *in, void *out, int *flag)
{
    copies++;
    extra_seen = *(int *)extra;
    *(intptr_t *)out = (intptr_t)in + 1;
    *flag = 1;
    return MPI_SUCCESS;
}

static int note_delete(MPI_Comm comm, int keyval, void *val, void *extra)
{
    deletes++;
    last_deleted = (int)(intptr_t)val;
    last_comm = comm;
    return MPI_SUCCESS;
}

static int type_copies, type_deletes;

static int type_copy(MPI_Datatype t, int keyval, void *extra, void *in, void *out, int *flag)
{
    type_copies++;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

static int type_delete(MPI_Datatype t, int keyval, void *val, void *extra)
{
    type_deletes++;
    return MPI_SUCCESS;
}

/* Finalize's deletions on MPI_COMM_SELF, in the order they ran. */
static int self_order[2], self_n;

static int self_delete(MPI_Comm comm, int keyval, void *val, void *extra)
{
    if (self_n < 2)
        self_order[self_n] = (int)(intptr_t)val;
    self_n++;
    return MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    int rank, flag, extra = 42;
    void *val;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    test_errors_return();

    /* ---- Communicator attributes with callbacks. */
    int key, key_null, key_dup;
    MPI_Comm a, b;
    MPI_CHECK(MPI_Comm_create_keyval(copy_plus_one, note_delete, &key, &extra));
    MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &key_null, NULL));
    MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, note_delete, &key_dup, NULL));
    CHECK(key != key_null && key != key_dup && key_null != key_dup, "keyvals repeat");
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &a));
    MPI_CHECK(MPI_Comm_get_attr(a, key, &val, &flag));
    CHECK(!flag, "an attribute nobody set is there");
    MPI_CHECK(MPI_Comm_set_attr(a, key, (void *)(intptr_t)100));
    MPI_CHECK(MPI_Comm_get_attr(a, key, &val, &flag));
    CHECK(flag && (intptr_t)val == 100, "get gave flag %d value %ld", flag, (long)(intptr_t)val);
    deletes = 0;
    MPI_CHECK(MPI_Comm_set_attr(a, key, (void *)(intptr_t)200));
    CHECK(deletes == 1 && last_deleted == 100 && last_comm == a,
          "replacing: %d deletes, last %d", deletes, last_deleted);
    MPI_CHECK(MPI_Comm_set_attr(a, key_null, (void *)(intptr_t)7));
    MPI_CHECK(MPI_Comm_set_attr(a, key_dup, (void *)(intptr_t)9));

    copies = 0;
    MPI_CHECK(MPI_Comm_dup(a, &b));
    CHECK(copies == 1 && extra_seen == 42, "dup: %d copies, extra %d", copies, extra_seen);
    MPI_CHECK(MPI_Comm_get_attr(b, key, &val, &flag));
    CHECK(flag && (intptr_t)val == 201, "copied value %ld", (long)(intptr_t)val);
    MPI_CHECK(MPI_Comm_get_attr(b, key_null, &val, &flag));
    CHECK(!flag, "MPI_COMM_NULL_COPY_FN copied the value");
    MPI_CHECK(MPI_Comm_get_attr(b, key_dup, &val, &flag));
    CHECK(flag && (intptr_t)val == 9, "MPI_COMM_DUP_FN gave %d %ld", flag, (long)(intptr_t)val);
    /* The original keeps its own. */
    MPI_CHECK(MPI_Comm_get_attr(a, key, &val, &flag));
    CHECK(flag && (intptr_t)val == 200, "original value %ld", (long)(intptr_t)val);

    deletes = 0;
    MPI_CHECK(MPI_Comm_delete_attr(a, key));
    CHECK(deletes == 1 && last_deleted == 200 && last_comm == a, "delete_attr: %d deletes, last %d",
          deletes, last_deleted);
    MPI_CHECK(MPI_Comm_get_attr(a, key, &val, &flag));
    CHECK(!flag, "deleted attribute still there");

    /* A keyval freed while values use it. */
    MPI_CHECK(MPI_Comm_free_keyval(&key));
    CHECK(key == MPI_KEYVAL_INVALID, "free_keyval left %d", key);
    deletes = 0;
    MPI_CHECK(MPI_Comm_free(&b));
    CHECK(deletes == 2, "freeing the duplicate ran %d delete callbacks", deletes);
    CHECK(b == MPI_COMM_NULL, "Comm_free did not null the handle");
    deletes = 0;
    MPI_CHECK(MPI_Comm_free(&a));
    CHECK(deletes == 1 && last_deleted == 9, "freeing the original: %d deletes, last %d", deletes,
          last_deleted);
    MPI_CHECK(MPI_Comm_free_keyval(&key_null));
    MPI_CHECK(MPI_Comm_free_keyval(&key_dup));

    /* ---- The MPI-1 names. */
    int k1;
    MPI_CHECK(MPI_Keyval_create(MPI_DUP_FN, note_delete, &k1, NULL));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &a));
    MPI_CHECK(MPI_Attr_put(a, k1, (void *)(intptr_t)5));
    MPI_CHECK(MPI_Attr_get(a, k1, &val, &flag));
    CHECK(flag && (intptr_t)val == 5, "Attr_get gave %d %ld", flag, (long)(intptr_t)val);
    MPI_CHECK(MPI_Comm_dup(a, &b));
    MPI_CHECK(MPI_Attr_get(b, k1, &val, &flag));
    CHECK(flag && (intptr_t)val == 5, "MPI_DUP_FN gave %d %ld", flag, (long)(intptr_t)val);
    deletes = 0;
    MPI_CHECK(MPI_Attr_delete(a, k1));
    CHECK(deletes == 1 && last_deleted == 5, "Attr_delete: %d deletes", deletes);
    MPI_CHECK(MPI_Keyval_free(&k1));
    CHECK(k1 == MPI_KEYVAL_INVALID, "Keyval_free left %d", k1);
    MPI_CHECK(MPI_Comm_free(&b));
    MPI_CHECK(MPI_Comm_free(&a));

    /* ---- Datatype attributes. */
    int tkey;
    MPI_Datatype t, t2;
    MPI_CHECK(MPI_Type_create_keyval(type_copy, type_delete, &tkey, NULL));
    MPI_CHECK(MPI_Type_contiguous(3, MPI_INT, &t));
    MPI_CHECK(MPI_Type_set_attr(t, tkey, &extra));
    MPI_CHECK(MPI_Type_get_attr(t, tkey, &val, &flag));
    CHECK(flag && val == &extra, "Type_get_attr gave %d %p", flag, val);
    MPI_CHECK(MPI_Type_dup(t, &t2));
    CHECK(type_copies == 1, "Type_dup: %d copies", type_copies);
    MPI_CHECK(MPI_Type_get_attr(t2, tkey, &val, &flag));
    CHECK(flag && val == &extra, "the dup's attribute: %d %p", flag, val);
    MPI_CHECK(MPI_Type_delete_attr(t2, tkey));
    CHECK(type_deletes == 1, "Type_delete_attr: %d deletes", type_deletes);
    MPI_CHECK(MPI_Type_get_attr(t2, tkey, &val, &flag));
    CHECK(!flag, "deleted type attribute still there");
    MPI_CHECK(MPI_Type_free(&t2));
    MPI_CHECK(MPI_Type_free(&t));
    CHECK(type_deletes == 2, "Type_free: %d deletes in all", type_deletes);
    MPI_CHECK(MPI_Type_free_keyval(&tkey));
    CHECK(tkey == MPI_KEYVAL_INVALID, "Type_free_keyval left %d", tkey);

    /* ---- Attributes of MPI_COMM_SELF are deleted by MPI_Finalize. */
    int sk1, sk2;
    MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_delete, &sk1, NULL));
    MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_delete, &sk2, NULL));
    MPI_CHECK(MPI_Comm_set_attr(MPI_COMM_SELF, sk1, (void *)(intptr_t)1));
    MPI_CHECK(MPI_Comm_set_attr(MPI_COMM_SELF, sk2, (void *)(intptr_t)2));
    MPI_CHECK(MPI_Comm_free_keyval(&sk1));
    MPI_CHECK(MPI_Comm_free_keyval(&sk2));
    CHECK(self_n == 0, "deleted before MPI_Finalize");

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_Finalize();
    CHECK(self_n == 2, "MPI_Finalize ran %d delete callbacks on MPI_COMM_SELF", self_n);
    CHECK(self_order[0] == 2 && self_order[1] == 1, "MPI_Finalize deleted %d then %d",
          self_order[0], self_order[1]);
    test_ok_rank(rank, "attrs");
    return 0;
}
