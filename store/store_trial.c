/*  store_trial.c - the trials and params tables: insert, save and load a
    trial, its lineage of parameter generations, and the study and trial
    details the CLI, the controller and the web API show (see store.h).
*/
#include "store_internal.h"

#include "../common/text.h"
#include "../common/wire.h"

#include <stdlib.h>
#include <string.h>

/* ---- trials ---- */

static int s_params_insert(store_t *s, long trial_id, long generation, long parent,
                           const json_t *params)
{
    const char *name;
    json_t *v;
    json_object_foreach((json_t *)params, name, v)
    {
        sqlite3_stmt *st = s->q[Q_PARAM_INSERT];
        sqlite3_bind_int64(st, 1, trial_id);
        sqlite3_bind_int64(st, 2, generation);
        if (parent >= 0)
            sqlite3_bind_int64(st, 3, parent);
        sqlite3_bind_text(st, 4, name, -1, SQLITE_TRANSIENT);
        store__bind_json(st, 5, v, JSON_ENCODE_ANY | JSON_COMPACT, NULL);
        if (store__run(s, st))
            return -1;
    }
    return 0;
}

int store_trial_insert(store_t *s, store_trial *t)
{
    sqlite3_stmt *st = s->q[Q_TRIAL_INSERT];
    sqlite3_bind_int64(st, 1, t->study_id);
    sqlite3_bind_int64(st, 2, t->number);
    sqlite3_bind_text(st, 3, store_trial_state_name(t->state), -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, t->attempt);
    sqlite3_bind_text(st, 5, t->token, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 6, t->generation);
    if (t->parent >= 0)
        sqlite3_bind_int64(st, 7, t->parent);
    sqlite3_bind_double(st, 8, t->created);
    if (t->id > 0)
        sqlite3_bind_int64(st, 9, t->id);
    if (store__run(s, st))
        return -1;
    t->id = (long)sqlite3_last_insert_rowid(s->db);
    return s_params_insert(s, t->id, t->generation, t->parent, t->params);
}

long store_trial_next_id(store_t *s)
{
    /* a deleted study's last trial id is in its study_deleted event */
    sqlite3_stmt *st = store__prepare(
        s, "SELECT MAX(COALESCE((SELECT MAX(id) FROM trials), 0), "
           "COALESCE((SELECT MAX(json_extract(detail, '$.last_trial')) FROM events "
           "WHERE kind='study_deleted'), 0)) + 1");
    if (!st)
        return -1;
    long id = store__step(s, st) == SQLITE_ROW ? (long)sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return id;
}

int store_trial_save(store_t *s, const store_trial *t)
{
    sqlite3_stmt *st = s->q[Q_TRIAL_SAVE];
    sqlite3_bind_int64(st, 1, t->id);
    sqlite3_bind_text(st, 2, store_trial_state_name(t->state), -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, t->attempt);
    store__bind_value(st, 4, t->value);
    store__bind_value(st, 5, t->last_value);
    store__bind_value(st, 6, t->best_value);
    sqlite3_bind_int64(st, 7, t->last_step);
    sqlite3_bind_int64(st, 8, t->metric_req);
    store__bind_text_or_null(st, 9, t->dispatcher);
    sqlite3_bind_int64(st, 10, t->pid);
    store__bind_text_or_null(st, 11, t->exit_how);
    sqlite3_bind_int64(st, 12, t->exit_code);
    store__bind_text_or_null(st, 13, t->reason);
    store__bind_text_or_null(st, 14, t->out_path);
    store__bind_text_or_null(st, 15, t->err_path);
    store__bind_text_or_null(st, 16, t->checkpoint);
    sqlite3_bind_int64(st, 17, t->checkpoint_step);
    sqlite3_bind_double(st, 18, t->started);
    sqlite3_bind_double(st, 19, t->ended);
    sqlite3_bind_int64(st, 20, t->generation);
    if (t->parent >= 0)
        sqlite3_bind_int64(st, 21, t->parent);
    store__bind_text_or_null(st, 22, t->metric_session);
    sqlite3_bind_int(st, 23, t->study_stopped != 0);
    sqlite3_bind_text(st, 24, t->token, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 25, t->preemptions);
    sqlite3_bind_int(st, 26, t->preempted != 0);
    sqlite3_bind_int64(st, 27, t->failures);
    return store__run(s, st);
}

int store_trial_set_params(store_t *s, long trial_id, long generation, long parent,
                           const json_t *params)
{
    return s_params_insert(s, trial_id, generation, parent, params);
}

#define TRIAL_COLS                                                                       \
    "id, study_id, number, state, attempt, token, generation, parent, value, "           \
    "last_value, "                                                                       \
    "best_value, last_step, metric_req, dispatcher, pid, exit_how, exit_code, reason, "  \
    "out_path, "                                                                         \
    "err_path, checkpoint, checkpoint_step, created, started, ended, metric_session, "   \
    "study_stopped, preemptions, preempted, failures"
/* TRIAL_COLS' indexes, in its order, read by s_trial_row. */
enum {
    TRIAL_C_ID,
    TRIAL_C_STUDY_ID,
    TRIAL_C_NUMBER,
    TRIAL_C_STATE,
    TRIAL_C_ATTEMPT,
    TRIAL_C_TOKEN,
    TRIAL_C_GENERATION,
    TRIAL_C_PARENT,
    TRIAL_C_VALUE,
    TRIAL_C_LAST_VALUE,
    TRIAL_C_BEST_VALUE,
    TRIAL_C_LAST_STEP,
    TRIAL_C_METRIC_REQ,
    TRIAL_C_DISPATCHER,
    TRIAL_C_PID,
    TRIAL_C_EXIT_HOW,
    TRIAL_C_EXIT_CODE,
    TRIAL_C_REASON,
    TRIAL_C_OUT_PATH,
    TRIAL_C_ERR_PATH,
    TRIAL_C_CHECKPOINT,
    TRIAL_C_CHECKPOINT_STEP,
    TRIAL_C_CREATED,
    TRIAL_C_STARTED,
    TRIAL_C_ENDED,
    TRIAL_C_METRIC_SESSION,
    TRIAL_C_STUDY_STOPPED,
    TRIAL_C_PREEMPTIONS,
    TRIAL_C_PREEMPTED,
    TRIAL_C_FAILURES,
};

json_t *store__params_of(store_t *s, long trial_id, long generation)
{
    enum { C_NAME, C_VALUE };
    sqlite3_stmt *st = store__prepare(
        s, "SELECT name, value FROM params WHERE trial_id=? AND generation=?");
    json_t *p = json_object();
    if (!st)
        return p;
    sqlite3_bind_int64(st, 1, trial_id);
    sqlite3_bind_int64(st, 2, generation);
    while (store__step(s, st) == SQLITE_ROW) {
        json_t *v = json_loads((const char *)sqlite3_column_text(st, C_VALUE),
                               JSON_DECODE_ANY, NULL);
        if (v)
            json_object_set_new(p, (const char *)sqlite3_column_text(st, C_NAME), v);
    }
    sqlite3_finalize(st);
    return p;
}

/* 0, or -1 (nothing owned left in *t) for a row the store refuses. */
static int s_trial_row(store_t *s, sqlite3_stmt *st, store_trial *t)
{
    memset(t, 0, sizeof *t);
    t->id = (long)sqlite3_column_int64(st, TRIAL_C_ID);
    t->study_id = (long)sqlite3_column_int64(st, TRIAL_C_STUDY_ID);
    t->number = (long)sqlite3_column_int64(st, TRIAL_C_NUMBER);
    if (store__col_trial_state(s, st, TRIAL_C_STATE, t->id, &t->state) != 0)
        return -1;
    t->attempt = (long)sqlite3_column_int64(st, TRIAL_C_ATTEMPT);
    store__col_text(st, TRIAL_C_TOKEN, t->token, sizeof t->token);
    t->generation = (long)sqlite3_column_int64(st, TRIAL_C_GENERATION);
    t->parent = store__col_id(st, TRIAL_C_PARENT);
    t->value = store__col_value(st, TRIAL_C_VALUE);
    t->last_value = store__col_value(st, TRIAL_C_LAST_VALUE);
    t->best_value = store__col_value(st, TRIAL_C_BEST_VALUE);
    /* NULL until the first save (store_trial_insert does not write it) */
    t->last_step = store__col_id(st, TRIAL_C_LAST_STEP);
    t->metric_req = (long)sqlite3_column_int64(st, TRIAL_C_METRIC_REQ);
    store__col_text(st, TRIAL_C_DISPATCHER, t->dispatcher, sizeof t->dispatcher);
    t->pid = (long)sqlite3_column_int64(st, TRIAL_C_PID);
    store__col_text(st, TRIAL_C_EXIT_HOW, t->exit_how, sizeof t->exit_how);
    t->exit_code = (long)sqlite3_column_int64(st, TRIAL_C_EXIT_CODE);
    store__col_text(st, TRIAL_C_REASON, t->reason, sizeof t->reason);
    store__col_text(st, TRIAL_C_OUT_PATH, t->out_path, sizeof t->out_path);
    store__col_text(st, TRIAL_C_ERR_PATH, t->err_path, sizeof t->err_path);
    store__col_text(st, TRIAL_C_CHECKPOINT, t->checkpoint, sizeof t->checkpoint);
    t->checkpoint_step = (long)sqlite3_column_int64(st, TRIAL_C_CHECKPOINT_STEP);
    t->created = sqlite3_column_double(st, TRIAL_C_CREATED);
    t->started = sqlite3_column_double(st, TRIAL_C_STARTED);
    t->ended = sqlite3_column_double(st, TRIAL_C_ENDED);
    store__col_text(st, TRIAL_C_METRIC_SESSION, t->metric_session,
                    sizeof t->metric_session);
    t->study_stopped = sqlite3_column_int(st, TRIAL_C_STUDY_STOPPED);
    t->preemptions = (long)sqlite3_column_int64(st, TRIAL_C_PREEMPTIONS);
    t->preempted = sqlite3_column_int(st, TRIAL_C_PREEMPTED);
    t->failures = (long)sqlite3_column_int64(st, TRIAL_C_FAILURES);
    t->params = store__params_of(s, t->id, t->generation);
    return 0;
}

long store_trials_load(store_t *s, long study_id, store_trial **out)
{
    sqlite3_stmt *st = store__prepare(s, "SELECT " TRIAL_COLS
                                         " FROM trials WHERE study_id=? ORDER BY number");
    *out = NULL;
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    long n = 0, cap = 0;
    int rc = store__reserve(out, &cap, 0, sizeof **out) ? SQLITE_NOMEM : SQLITE_ROW;
    while (rc == SQLITE_ROW && (rc = store__step(s, st)) == SQLITE_ROW) {
        if (store__reserve(out, &cap, n, sizeof **out)) {
            rc = SQLITE_NOMEM;
            break;
        }
        if (s_trial_row(s, st, &(*out)[n]) != 0) {
            rc = SQLITE_ERROR;
            break;
        }
        n++;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) { /* out of memory or a failed read: nothing */
        store_trials_free(*out, n);
        *out = NULL;
        return -1;
    }
    return n;
}

int store_trial_get(store_t *s, long trial_id, store_trial *out)
{
    sqlite3_stmt *st = store__prepare(s, "SELECT " TRIAL_COLS " FROM trials WHERE id=?");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, trial_id);
    int rc = store__step(s, st);
    int found = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
    if (found == 1 && s_trial_row(s, st, out) != 0)
        found = -1;
    sqlite3_finalize(st);
    return found;
}

void store_trial_fini(store_trial *t)
{
    if (t) {
        json_decref(t->params);
        t->params = NULL;
    }
}

void store_trials_free(store_trial *t, long n)
{
    for (long i = 0; i < n; i++)
        store_trial_fini(&t[i]);
    free(t);
}

json_t *store_trial_json(const store_trial *t, store_t *s)
{
    json_t *j = json_pack(
        "{s:I, s:I, s:I, s:s, s:I, s:O, s:I, s:o, s:o, s:o, s:o, s:I, s:s, s:I, s:s, "
        "s:I, s:s, "
        "s:s, s:s, s:s, s:f, s:f, s:f}",
        "id", (json_int_t)t->id, "study_id", (json_int_t)t->study_id, "number",
        (json_int_t)t->number, "state", store_trial_state_name(t->state), "attempt",
        (json_int_t)t->attempt, "params", t->params, "generation",
        (json_int_t)t->generation, "parent",
        t->parent >= 0 ? json_integer(t->parent) : json_null(), "value",
        wire_real(t->value), "last_value", wire_real(t->last_value), "best_value",
        wire_real(t->best_value), "last_step", (json_int_t)t->last_step, "dispatcher",
        t->dispatcher, "pid", (json_int_t)t->pid, "exit_how", t->exit_how, "exit_code",
        (json_int_t)t->exit_code, "reason", t->reason, "stdout", t->out_path, "stderr",
        t->err_path, "checkpoint", t->checkpoint, "created", t->created, "started",
        t->started, "ended", t->ended);
    if (j) {
        json_object_set_new(j, "preemptions", json_integer(t->preemptions));
        json_object_set_new(j, "failures", json_integer(t->failures));
    }
    if (j && s)
        json_object_set_new(j, "metrics", store_metrics_last(s, t->id));
    return j;
}

json_t *store_trial_lineage(store_t *s, long trial_id)
{
    enum { C_GENERATION, C_PARENT };
    sqlite3_stmt *st = store__prepare(s, "SELECT DISTINCT generation, parent FROM params "
                                         "WHERE trial_id=? ORDER BY generation");
    json_t *out = json_array();
    if (!st)
        return out;
    sqlite3_bind_int64(st, 1, trial_id);
    while (store__step(s, st) == SQLITE_ROW) {
        long gen = (long)sqlite3_column_int64(st, C_GENERATION);
        json_array_append_new(
            out, json_pack("{s:I, s:o, s:o}", "generation", (json_int_t)gen, "parent",
                           sqlite3_column_type(st, C_PARENT) == SQLITE_NULL
                               ? json_null()
                               : json_integer(sqlite3_column_int64(st, C_PARENT)),
                           "params", store__params_of(s, trial_id, gen)));
    }
    sqlite3_finalize(st);
    return out;
}

json_t *store_study_detail(store_t *s, const char *name)
{
    store_study st;
    if (store_study_get(s, name, &st) != 1)
        return NULL;
    store_trial *rows;
    long n = store_trials_load(s, st.id, &rows);
    if (n < 0) { /* store_errmsg says why */
        store_study_fini(&st);
        return NULL;
    }
    json_t *trials = json_array();
    for (long i = 0; i < n; i++) {
        json_t *t = store_trial_json(&rows[i], s);
        json_t *lin = store_trial_lineage(s, rows[i].id);
        json_t *first = json_array_get(lin, 0);
        json_object_set(t, "sampled",
                        first ? json_object_get(first, "params") : rows[i].params);
        json_decref(lin);
        json_array_append_new(trials, t);
    }
    store_trials_free(rows, n < 0 ? 0 : n);
    json_t *out = json_pack(
        "{s:I, s:s, s:s, s:O, s:o, s:o, s:o, s:o}", "id", (json_int_t)st.id, "name",
        st.name, "state", store_study_state_name(st.state), "spec", st.spec, "created",
        store__num_or_null(st.created), "finished", store__num_or_null(st.finished),
        "trials", trials, "events", store_events_list(s, st.id));
    store_study_best(s, &st, out); /* best, or the Pareto set */
    store_study_fini(&st);
    return out;
}

json_t *store_trial_detail(store_t *s, long trial_id)
{
    store_trial t;
    if (store_trial_get(s, trial_id, &t) != 1)
        return NULL;
    json_t *j = store_trial_json(&t, s);
    json_object_set_new(j, "lineage", store_trial_lineage(s, t.id));
    json_t *iv = store_interv_list(s, t.id); /* guarded changes, forks */
    json_object_set_new(j, "interventions", iv ? iv : json_array());
    store_study st;
    if (store_study_get_id(s, t.study_id, &st) == 1) {
        json_object_set_new(j, "study", json_string(st.name));
        store_study_fini(&st);
    }
    store_trial_fini(&t);
    return j;
}
