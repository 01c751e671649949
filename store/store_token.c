/*  store_token.c - the tokens table: hashes of the web API's bearer
    tokens with their user and role (see store.h). Written by `jizhi
    token` (a short read-write open of the store), read by the web server
    on each POST. */
#include "store_internal.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

long store_token_add(store_t *s, const char *user, const char *role, const char *hash_hex,
                     double now)
{
    sqlite3 *db = store__db(s);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(
            db, "INSERT INTO tokens(user, role, hash, created) VALUES (?,?,?,?)", -1, &st,
            NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, user, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, role, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, hash_hex, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 4, now);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? (long)sqlite3_last_insert_rowid(db) : -1;
}

/* A token row: TOKEN_COLS, read by s_row through TOKEN_C_*. */
#define TOKEN_COLS "id, user, role, created, revoked"
enum { TOKEN_C_ID, TOKEN_C_USER, TOKEN_C_ROLE, TOKEN_C_CREATED, TOKEN_C_REVOKED };

static void s_row(sqlite3_stmt *st, store_token *out)
{
    memset(out, 0, sizeof *out);
    out->id = (long)sqlite3_column_int64(st, TOKEN_C_ID);
    snprintf(out->user, sizeof out->user, "%s",
             (const char *)sqlite3_column_text(st, TOKEN_C_USER));
    snprintf(out->role, sizeof out->role, "%s",
             (const char *)sqlite3_column_text(st, TOKEN_C_ROLE));
    out->created = sqlite3_column_double(st, TOKEN_C_CREATED);
    out->revoked = sqlite3_column_type(st, TOKEN_C_REVOKED) == SQLITE_NULL
                       ? 0
                       : sqlite3_column_double(st, TOKEN_C_REVOKED);
}

int store_token_find(store_t *s, const char *hash_hex, store_token *out)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(store__db(s),
                           "SELECT " TOKEN_COLS " FROM tokens "
                           "WHERE hash=? AND revoked IS NULL",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, hash_hex, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    int found = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
    if (found == 1)
        s_row(st, out);
    sqlite3_finalize(st);
    return found;
}

json_t *store_token_list(store_t *s)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(store__db(s), "SELECT " TOKEN_COLS " FROM tokens ORDER BY id",
                           -1, &st, NULL) != SQLITE_OK)
        return NULL;
    json_t *out = json_array();
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        store_token t;
        s_row(st, &t);
        json_array_append_new(
            out, json_pack("{s:I, s:s, s:s, s:f, s:o}", "id", (json_int_t)t.id, "user",
                           t.user, "role", t.role, "created", t.created, "revoked",
                           t.revoked > 0 ? json_real(t.revoked) : json_null()));
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        json_decref(out);
        return NULL;
    }
    return out;
}

long store_token_revoke(store_t *s, long id, const char *user, double now)
{
    sqlite3 *db = store__db(s);
    sqlite3_stmt *st = NULL;
    const char *sql =
        id > 0 ? "UPDATE tokens SET revoked=?1 WHERE id=?2 AND revoked IS NULL"
               : "UPDATE tokens SET revoked=?1 WHERE user=?3 AND revoked IS NULL";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_double(st, 1, now);
    if (id > 0)
        sqlite3_bind_int64(st, 2, id);
    else
        sqlite3_bind_text(st, 3, user ? user : "", -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? (long)sqlite3_changes(db) : -1;
}
