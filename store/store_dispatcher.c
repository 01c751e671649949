/*  store_dispatcher.c - the dispatchers table: the dispatchers the
    controller has seen, their slots and GPUs (see store.h; the identity a
    name is bound to is store_auth.c's).
*/
#include "store_internal.h"

/* ---- dispatchers ---- */

int store_dispatcher_upsert(store_t *s, const char *name, long slots, const char *gpus,
                            double now)
{
    sqlite3_stmt *st =
        store__prepare(s, "INSERT INTO dispatchers(name, slots, gpus, last_seen) "
                          "VALUES (?1,?2,?3,?4) ON CONFLICT(name) DO UPDATE SET "
                          "slots=?2, gpus=?3, last_seen=?4");
    if (!st)
        return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, slots);
    sqlite3_bind_text(st, 3, gpus ? gpus : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 4, now);
    return store__exec(s, st);
}

int store_dispatcher_delete(store_t *s, const char *name)
{
    sqlite3_stmt *st = store__prepare(s, "DELETE FROM dispatchers WHERE name=?");
    if (!st)
        return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    return store__exec(s, st);
}
