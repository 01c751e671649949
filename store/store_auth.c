/*  store_auth.c - the identities the store keeps: which identity (a CURVE
    key or a Unix uid, as the controller names it) a dispatcher name is
    bound to (see store.h). */
#include "store_internal.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

int store_dispatcher_owner(store_t *s, const char *name, char *out, size_t size)
{
    sqlite3_stmt *st = NULL;
    out[0] = 0;
    if (sqlite3_prepare_v2(store__db(s), "SELECT owner FROM dispatchers WHERE name=?", -1,
                           &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    int rc = store__step(s, st);
    if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        snprintf(out, size, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

int store_dispatcher_set_owner(store_t *s, const char *name, const char *owner)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(store__db(s), "UPDATE dispatchers SET owner=? WHERE name=?",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, owner, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
    return store__exec(s, st);
}
