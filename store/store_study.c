/*  store_study.c - the studies table and what hangs on a study row: its
    spec, scheduler state and extra budget, the configurations a person
    queued (enqueued), the study list and the live studies (see store.h).
*/
#include "store_internal.h"

#include "../common/text.h"

#include <stdlib.h>
#include <string.h>

/* ---- studies ---- */

long store_study_insert(store_t *s, const char *name, const json_t *spec,
                        store_study_state state, double now)
{
    sqlite3_stmt *st = store__prepare(
        s, "INSERT INTO studies(name, spec, state, created) VALUES (?,?,?,?)");
    if (!st)
        return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    store__bind_json(st, 2, spec, JSON_SORT_KEYS | JSON_COMPACT, NULL);
    sqlite3_bind_text(st, 3, store_study_state_name(state), -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 4, now);
    return store__exec(s, st) == 0 ? (long)sqlite3_last_insert_rowid(s->db) : -1;
}

/* A study row: STUDY_COLS, read by s_study_row through STUDY_C_*. */
#define STUDY_COLS "id, name, state, spec, sched_state, created, finished, extra_trials"
enum {
    STUDY_C_ID,
    STUDY_C_NAME,
    STUDY_C_STATE,
    STUDY_C_SPEC,
    STUDY_C_SCHED_STATE,
    STUDY_C_CREATED,
    STUDY_C_FINISHED,
    STUDY_C_EXTRA_TRIALS,
};

/* 1, or -1 (nothing owned left in *out) for a row the store refuses. */
static int s_study_row(store_t *s, sqlite3_stmt *st, store_study *out)
{
    memset(out, 0, sizeof *out);
    out->id = (long)sqlite3_column_int64(st, STUDY_C_ID);
    store__col_text(st, STUDY_C_NAME, out->name, sizeof out->name);
    if (store__col_study_state(s, st, STUDY_C_STATE, out->name, &out->state) != 0)
        return -1;
    out->spec = store__col_json(st, STUDY_C_SPEC);
    out->sched_state = store__col_json(st, STUDY_C_SCHED_STATE);
    out->created = store__col_double(st, STUDY_C_CREATED);
    out->finished = store__col_double(st, STUDY_C_FINISHED);
    out->extra_trials = (long)sqlite3_column_int64(st, STUDY_C_EXTRA_TRIALS);
    return out->spec ? 1 : -1;
}

/* The one row of st (bound; NULL: prepare failed) into *out, st
   finalized: 1, 0 when there is none, -1 on error. */
static int s_study_one(store_t *s, sqlite3_stmt *st, store_study *out)
{
    if (!st)
        return -1;
    int rc = store__step(s, st);
    int found = rc == SQLITE_ROW ? s_study_row(s, st, out) : rc == SQLITE_DONE ? 0 : -1;
    sqlite3_finalize(st);
    return found;
}

int store_study_get(store_t *s, const char *name, store_study *out)
{
    sqlite3_stmt *st =
        store__prepare(s, "SELECT " STUDY_COLS " FROM studies WHERE name=?");
    if (st)
        sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    return s_study_one(s, st, out);
}

int store_study_get_id(store_t *s, long id, store_study *out)
{
    sqlite3_stmt *st = store__prepare(s, "SELECT " STUDY_COLS " FROM studies WHERE id=?");
    if (st)
        sqlite3_bind_int64(st, 1, id);
    return s_study_one(s, st, out);
}

void store_study_fini(store_study *st)
{
    if (st) {
        json_decref(st->spec);
        json_decref(st->sched_state);
        st->spec = st->sched_state = NULL;
    }
}

int store_study_set_state(store_t *s, long id, store_study_state state, double now)
{
    sqlite3_stmt *st =
        store__prepare(s, "UPDATE studies SET state=?2, finished=CASE WHEN "
                          "?2='finished' THEN ?3 ELSE NULL END "
                          "WHERE id=?1");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, store_study_state_name(state), -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 3, now);
    return store__exec(s, st);
}

int store_study_set_sched(store_t *s, long id, const json_t *sched_state)
{
    sqlite3_stmt *st = store__prepare(s, "UPDATE studies SET sched_state=? WHERE id=?");
    if (!st)
        return -1;
    store__bind_json(st, 1, sched_state, JSON_COMPACT, NULL);
    sqlite3_bind_int64(st, 2, id);
    return store__exec(s, st);
}

int store_study_add_trials(store_t *s, long id, long n)
{
    sqlite3_stmt *st = store__prepare(
        s, "UPDATE studies SET extra_trials = extra_trials + ? WHERE id=?");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, n);
    sqlite3_bind_int64(st, 2, id);
    int rc = store__step(s, st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE && sqlite3_changes(s->db) == 1 ? 0 : -1;
}

long store_enqueued_add(store_t *s, long study_id, const json_t *params, const char *who,
                        double now)
{
    sqlite3_stmt *st = store__prepare(
        s, "INSERT INTO enqueued(study_id, params, who, created) VALUES (?,?,?,?)");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    store__bind_json(st, 2, params, JSON_COMPACT, "{}");
    sqlite3_bind_text(st, 3, who ? who : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 4, now);
    return store__exec(s, st) == 0 ? (long)sqlite3_last_insert_rowid(s->db) : -1;
}

long store_enqueued_first(store_t *s, long study_id, json_t **params)
{
    *params = NULL;
    enum { C_ID, C_PARAMS };
    sqlite3_stmt *st = store__prepare(
        s, "SELECT id, params FROM enqueued WHERE study_id=? ORDER BY id LIMIT 1");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    int rc = store__step(s, st);
    long id = 0;
    if (rc == SQLITE_ROW) {
        id = (long)sqlite3_column_int64(st, C_ID);
        *params = store__col_json(st, C_PARAMS);
        if (!*params)
            id = -1;
    } else if (rc != SQLITE_DONE) {
        id = -1;
    }
    sqlite3_finalize(st);
    return id;
}

long store_enqueued_count(store_t *s, long study_id)
{
    sqlite3_stmt *st =
        store__prepare(s, "SELECT COUNT(*) FROM enqueued WHERE study_id=?");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    long n = store__step(s, st) == SQLITE_ROW ? (long)sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return n;
}

int store_enqueued_del(store_t *s, long id)
{
    sqlite3_stmt *st = store__prepare(s, "DELETE FROM enqueued WHERE id=?");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, id);
    return store__exec(s, st);
}

json_t *store_study_list(store_t *s)
{
    enum {
        C_ID,
        C_NAME,
        C_STATE,
        C_CREATED,
        C_FINISHED,
        C_TRIALS,
        C_COMPLETED,
        C_FAILED,
        C_RUNNING,
        C_BUDGET,
        C_STOPPED,
        C_PRUNED,
    };
    sqlite3_stmt *st = store__prepare(
        s, "SELECT s.id, s.name, s.state, s.created, s.finished, COUNT(t.id),"
           " SUM(t.state='completed'), SUM(t.state='failed'), SUM(t.state IN "
           "('running','starting','paused')),"
           " json_extract(s.spec, '$.budget.trials') + s.extra_trials,"
           " SUM(t.state='stopped'), SUM(t.state='pruned')"
           " FROM studies s LEFT JOIN trials t ON t.study_id = s.id GROUP BY "
           "s.id ORDER BY s.id");
    if (!st)
        return NULL;
    json_t *out = json_array();
    int rc;
    while ((rc = store__step(s, st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, C_NAME);
        store_study_state state;
        if (store__col_study_state(s, st, C_STATE, name, &state) != 0)
            break;
        json_t *e =
            json_pack("{s:I, s:s, s:s, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                      "id", (json_int_t)sqlite3_column_int64(st, C_ID), "name", name,
                      "state", store_study_state_name(state), "created",
                      json_real(sqlite3_column_double(st, C_CREATED)), "finished",
                      store__num_or_null(store__col_double(st, C_FINISHED)), "trials",
                      (json_int_t)sqlite3_column_int64(st, C_TRIALS), "completed",
                      (json_int_t)sqlite3_column_int64(st, C_COMPLETED), "failed",
                      (json_int_t)sqlite3_column_int64(st, C_FAILED), "running",
                      (json_int_t)sqlite3_column_int64(st, C_RUNNING), "budget",
                      (json_int_t)sqlite3_column_int64(st, C_BUDGET), "stopped",
                      (json_int_t)sqlite3_column_int64(st, C_STOPPED), "pruned",
                      (json_int_t)sqlite3_column_int64(st, C_PRUNED));
        if (e)
            json_array_append_new(out, e);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) { /* a read error, or a state text that names none */
        json_decref(out);
        return NULL;
    }
    /* each study's best (or Pareto set), by the one definition */
    size_t i;
    json_t *e;
    json_array_foreach(out, i, e)
    {
        store_study row = {0};
        if (store_study_get_id(s, json_integer_value(json_object_get(e, "id")), &row) ==
            1)
            store_study_best(s, &row, e);
        store_study_fini(&row);
    }
    return out;
}

long store_live_studies(store_t *s, long **ids)
{
    sqlite3_stmt *st = store__prepare(
        s, "SELECT id FROM studies WHERE state='running' OR (state='stopped' AND "
           "EXISTS (SELECT 1 FROM trials t WHERE t.study_id=studies.id AND "
           "t.state IN ('starting','running','paused'))) ORDER BY id");
    *ids = NULL;
    if (!st)
        return -1;
    long n = 0, cap = 0;
    int rc = store__reserve(ids, &cap, 0, sizeof **ids) ? SQLITE_NOMEM : SQLITE_ROW;
    while (rc == SQLITE_ROW && (rc = store__step(s, st)) == SQLITE_ROW) {
        if (store__reserve(ids, &cap, n, sizeof **ids)) {
            rc = SQLITE_NOMEM;
            break;
        }
        (*ids)[n++] = (long)sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) { /* out of memory or a failed read: nothing */
        free(*ids);
        *ids = NULL;
        return -1;
    }
    return n;
}
