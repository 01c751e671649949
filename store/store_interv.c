/*  store_interv.c - the interventions table (see store.h): a person's
    guarded changes and live forks of running trials. The controller
    (controller/ctl_guard.c, ctl_fork.c) writes a row's state and data
    inside its iteration's transaction before it acts on them, and reads
    the unfinished ones back when it starts, so that a decision under way
    resumes after a restart. */
#include "store_internal.h"

#include "../common/text.h"
#include "../common/util.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long store_interv_insert(store_t *s, long study_id, long trial_id, const char *kind,
                         const char *state, int done, const json_t *data, double now)
{
    sqlite3_stmt *st =
        store__prepare(s, "INSERT INTO interventions(study_id, trial_id, kind, state, "
                          "done, data, created, updated) VALUES (?,?,?,?,?,?,?,?7)");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    sqlite3_bind_int64(st, 2, trial_id);
    sqlite3_bind_text(st, 3, kind, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, state, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 5, done);
    store__bind_json(st, 6, data, JSON_COMPACT | JSON_SORT_KEYS, "{}");
    sqlite3_bind_double(st, 7, now);
    return store__exec(s, st) == 0 ? (long)sqlite3_last_insert_rowid(store__db(s)) : -1;
}

int store_interv_save(store_t *s, long id, const char *state, int done,
                      const json_t *data, double now)
{
    sqlite3_stmt *st =
        store__prepare(s, "UPDATE interventions SET state=?, done=?, data=?, updated=? "
                          "WHERE id=?");
    if (!st)
        return -1;
    sqlite3_bind_text(st, 1, state, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 2, done);
    store__bind_json(st, 3, data, JSON_COMPACT | JSON_SORT_KEYS, "{}");
    sqlite3_bind_double(st, 4, now);
    sqlite3_bind_int64(st, 5, id);
    return store__exec(s, st) == 0 && sqlite3_changes(store__db(s)) == 1 ? 0 : -1;
}

/* The columns of an intervention row: IV_COLS, read through IV_*. */
#define IV_COLS "id, study_id, trial_id, kind, state, done, data, created, updated"
enum {
    IV_ID,
    IV_STUDY,
    IV_TRIAL,
    IV_KIND,
    IV_STATE,
    IV_DONE,
    IV_DATA,
    IV_CREATED,
    IV_UPDATED
};

static json_t *s_rows(store_t *s, sqlite3_stmt *st);

json_t *store_interv_study(store_t *s, long study_id)
{
    sqlite3_stmt *st = store__prepare(
        s, "SELECT " IV_COLS " FROM interventions WHERE study_id=?1 ORDER BY id");
    if (!st)
        return NULL;
    sqlite3_bind_int64(st, 1, study_id);
    return s_rows(s, st);
}

json_t *store_interv_list(store_t *s, int open, long trial_id)
{
    sqlite3_stmt *st = store__prepare(
        s, open ? "SELECT " IV_COLS " FROM interventions WHERE done=0 ORDER BY id"
                : "SELECT " IV_COLS " FROM interventions WHERE trial_id=?1 OR "
                  "(kind='fork' AND EXISTS (SELECT 1 FROM json_each(interventions.data, "
                  "'$.siblings') WHERE json_each.value=?1)) ORDER BY id");
    if (!st)
        return NULL;
    if (!open)
        sqlite3_bind_int64(st, 1, trial_id);
    return s_rows(s, st);
}

/* The rows of st (store_interv_list's columns) as its objects; finalizes
   st. NULL on error. */
static json_t *s_rows(store_t *s, sqlite3_stmt *st)
{
    json_t *out = json_array();
    int rc;
    while ((rc = store__step(s, st)) == SQLITE_ROW) {
        const char *d = (const char *)sqlite3_column_text(st, IV_DATA);
        json_t *data = d ? json_loads(d, 0, NULL) : NULL;
        json_array_append_new(
            out, json_pack("{s:I, s:I, s:I, s:s, s:s, s:b, s:o, s:f, s:f}", "id",
                           (json_int_t)sqlite3_column_int64(st, IV_ID), "study_id",
                           (json_int_t)sqlite3_column_int64(st, IV_STUDY), "trial_id",
                           (json_int_t)sqlite3_column_int64(st, IV_TRIAL), "kind",
                           (const char *)sqlite3_column_text(st, IV_KIND), "state",
                           (const char *)sqlite3_column_text(st, IV_STATE), "done",
                           sqlite3_column_int(st, IV_DONE), "data",
                           data ? data : json_object(), "created",
                           sqlite3_column_double(st, IV_CREATED), "updated",
                           sqlite3_column_double(st, IV_UPDATED)));
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        json_decref(out);
        return NULL;
    }
    return out;
}

/* ---- waiting for an intervention's outcome (store.h) ---- */

/* The newest intervention of w's kind on its trial (borrowed from list),
   or NULL. */
static json_t *s_newest(const store_interv_wait *w, json_t *list)
{
    json_t *found = NULL, *x;
    size_t i;
    json_array_foreach(list, i, x)
    {
        if (json_integer_value(json_object_get(x, "trial_id")) == w->trial &&
            !strcmp(json_string_value(json_object_get(x, "kind")), w->kind))
            found = x;
    }
    return found;
}

void store_interv_wait_init(store_interv_wait *w, store_t *s, long trial,
                            const char *kind)
{
    memset(w, 0, sizeof *w);
    w->store = s;
    w->trial = trial;
    w->kind = kind;
    if (!s)
        return;
    json_t *list = store_interv_list(s, 0, trial);
    json_t *iv = list ? s_newest(w, list) : NULL;
    w->after = iv ? (long)json_integer_value(json_object_get(iv, "id")) : 0;
    json_decref(list);
}

json_t *store_interv_wait_check(void *arg)
{
    store_interv_wait *w = arg;
    if (!w->store)
        return NULL;
    json_t *list = store_interv_list(w->store, 0, w->trial);
    json_t *iv = list ? s_newest(w, list) : NULL;
    json_t *out = NULL;
    if (iv && json_integer_value(json_object_get(iv, "id")) > w->after &&
        json_is_true(json_object_get(iv, "done"))) {
        double now = util_now();
        if (!w->final_at)
            w->final_at = now;
        else if (now - w->final_at >= STORE_INTERV_GRACE_S) {
            out = json_pack("{s:s, s:O, s:I, s:O, s:b}", "type", "ok", w->kind,
                            json_object_get(iv, "state"), "trial", (json_int_t)w->trial,
                            "intervention", json_object_get(iv, "id"), "from_store", 1);
            json_object_update_missing(out, json_object_get(iv, "data"));
        }
    }
    json_decref(list);
    return out;
}
