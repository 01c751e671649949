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

/* ---- kinds and states <-> column text (store.h) ---- */

static const char *const s_kinds[IV_KIND_COUNT] = {
    [IV_GUARD] = "guard", [IV_FORK] = "fork"};

static const char *const s_guard_states[GUARD_COUNT] = {
    [GUARD_CHECKPOINT] = "checkpoint",
    [GUARD_APPLY] = "apply",
    [GUARD_WATCH] = "watch",
    [GUARD_REVERT] = "revert",
    [GUARD_KEPT] = "kept",
    [GUARD_REVERTED] = "reverted",
    [GUARD_REFUSED] = "refused",
    [GUARD_ENDED] = "ended",
    [GUARD_FAILED] = "failed",
};

static const char *const s_fork_states[FORK_COUNT] = {
    [FORK_CHECKPOINT] = "checkpoint",
    [FORK_RUNNING] = "running",
    [FORK_DECIDED] = "decided",
    [FORK_REFUSED] = "refused",
};

/* The state names of kind (NULL for no kind) and their count in *n. */
static const char *const *s_states(store_iv_kind kind, int *n)
{
    *n = kind == IV_GUARD ? GUARD_COUNT : kind == IV_FORK ? FORK_COUNT : 0;
    return kind == IV_GUARD ? s_guard_states : kind == IV_FORK ? s_fork_states : NULL;
}

const char *store_iv_kind_name(store_iv_kind kind)
{
    return (unsigned)kind < IV_KIND_COUNT ? s_kinds[kind] : "invalid";
}

int store_iv_kind_parse(const char *text, store_iv_kind *out)
{
    int i = util_name_index(s_kinds, IV_KIND_COUNT, text);
    if (i < 0)
        return -1;
    *out = (store_iv_kind)i;
    return 0;
}

const char *store_iv_state_name(store_iv_kind kind, int state)
{
    int n;
    const char *const *names = s_states(kind, &n);
    return state >= 0 && state < n ? names[state] : "invalid";
}

int store_iv_state_parse(store_iv_kind kind, const char *text, int *out)
{
    int n;
    const char *const *names = s_states(kind, &n);
    int i = names ? util_name_index(names, n, text) : -1;
    if (i < 0)
        return -1;
    *out = i;
    return 0;
}

int store_iv_state_final(store_iv_kind kind, int state)
{
    return kind == IV_GUARD ? state >= GUARD_KEPT : state >= FORK_DECIDED;
}

int store_iv_answer_state(const json_t *answer, store_iv_kind kind)
{
    int st;
    const char *text =
        json_string_value(json_object_get(answer, store_iv_kind_name(kind)));
    return store_iv_state_parse(kind, text, &st) == 0 ? st : -1;
}

/* ---- rows ---- */

/* 0 when kind and state name a kind and one of its states, else -1 with
   store_errmsg saying which (nothing is written then). */
static int s_check_state(store_t *s, store_iv_kind kind, int state)
{
    int n;
    if (!s_states(kind, &n))
        return store__refuse(s, "intervention kind %d names no kind", (int)kind);
    if (state < 0 || state >= n)
        return store__refuse(s, "intervention state %d names no %s state", state,
                             store_iv_kind_name(kind));
    return 0;
}

long store_interv_insert(store_t *s, long study_id, long trial_id, store_iv_kind kind,
                         int state, const json_t *data, double now)
{
    if (s_check_state(s, kind, state) != 0)
        return -1;
    sqlite3_stmt *st =
        store__prepare(s, "INSERT INTO interventions(study_id, trial_id, kind, state, "
                          "done, data, created, updated) VALUES (?,?,?,?,?,?,?,?7)");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    sqlite3_bind_int64(st, 2, trial_id);
    sqlite3_bind_text(st, 3, store_iv_kind_name(kind), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, store_iv_state_name(kind, state), -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, store_iv_state_final(kind, state));
    store__bind_json(st, 6, data, JSON_COMPACT | JSON_SORT_KEYS, "{}");
    sqlite3_bind_double(st, 7, now);
    return store__exec(s, st) == 0 ? (long)sqlite3_last_insert_rowid(store__db(s)) : -1;
}

int store_interv_save(store_t *s, long id, store_iv_kind kind, int state,
                      const json_t *data, double now)
{
    if (s_check_state(s, kind, state) != 0)
        return -1;
    sqlite3_stmt *st =
        store__prepare(s, "UPDATE interventions SET state=?, done=?, data=?, updated=? "
                          "WHERE id=?");
    if (!st)
        return -1;
    sqlite3_bind_text(st, 1, store_iv_state_name(kind, state), -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, store_iv_state_final(kind, state));
    store__bind_json(st, 3, data, JSON_COMPACT | JSON_SORT_KEYS, "{}");
    sqlite3_bind_double(st, 4, now);
    sqlite3_bind_int64(st, 5, id);
    if (store__exec(s, st) != 0)
        return -1;
    return sqlite3_changes(store__db(s)) == 1
               ? 0
               : store__refuse(s, "no intervention %ld", id);
}

/* The columns of an intervention row: IV_COLS, read through IV_C_*. */
#define IV_COLS "id, study_id, trial_id, kind, state, done, data, created, updated"
enum {
    IV_C_ID,
    IV_C_STUDY,
    IV_C_TRIAL,
    IV_C_KIND,
    IV_C_STATE,
    IV_C_DONE,
    IV_C_DATA,
    IV_C_CREATED,
    IV_C_UPDATED
};

/* Reads st's row (IV_COLS) into *iv (its data owned: json_decref it).
   0, or -1 with store_errmsg when the kind or state text names none
   (only iv->id is filled then). */
static int s_row(store_t *s, sqlite3_stmt *st, store_interv *iv)
{
    memset(iv, 0, sizeof *iv);
    iv->id = (long)sqlite3_column_int64(st, IV_C_ID);
    const char *kind = (const char *)sqlite3_column_text(st, IV_C_KIND);
    if (store_iv_kind_parse(kind, &iv->kind) != 0)
        return store__refuse(s, "intervention %ld: unknown kind '%s' in the database",
                             iv->id, kind ? kind : "(null)");
    const char *state = (const char *)sqlite3_column_text(st, IV_C_STATE);
    if (store_iv_state_parse(iv->kind, state, &iv->state) != 0)
        return store__refuse(s, "intervention %ld: unknown %s state '%s' in the database",
                             iv->id, kind, state ? state : "(null)");
    iv->study_id = (long)sqlite3_column_int64(st, IV_C_STUDY);
    iv->trial_id = (long)sqlite3_column_int64(st, IV_C_TRIAL);
    iv->done = sqlite3_column_int(st, IV_C_DONE);
    iv->data = store__col_json(st, IV_C_DATA);
    if (!iv->data)
        iv->data = json_object();
    iv->created = sqlite3_column_double(st, IV_C_CREATED);
    iv->updated = sqlite3_column_double(st, IV_C_UPDATED);
    return 0;
}

long store_interv_open(store_t *s, store_interv_fn fn, void *arg)
{
    sqlite3_stmt *st = store__prepare(s, "SELECT " IV_COLS
                                         " FROM interventions WHERE done=0 ORDER BY id");
    if (!st)
        return -1;
    long n = 0;
    int rc;
    while ((rc = store__step(s, st)) == SQLITE_ROW) {
        store_interv iv;
        int bad = s_row(s, st, &iv);
        fn(arg, &iv, bad ? store_errmsg(s) : NULL);
        json_decref(iv.data);
        n++;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? n : -1;
}

/* The rows of st (IV_COLS) as their objects, the kind and state named from
   the enums; finalizes st. NULL on error or a text that names none. */
static json_t *s_rows(store_t *s, sqlite3_stmt *st)
{
    json_t *out = json_array();
    int rc;
    store_interv iv;
    while ((rc = store__step(s, st)) == SQLITE_ROW && s_row(s, st, &iv) == 0)
        json_array_append_new(
            out,
            json_pack("{s:I, s:I, s:I, s:s, s:s, s:b, s:o, s:f, s:f}", "id",
                      (json_int_t)iv.id, "study_id", (json_int_t)iv.study_id, "trial_id",
                      (json_int_t)iv.trial_id, "kind", store_iv_kind_name(iv.kind),
                      "state", store_iv_state_name(iv.kind, iv.state), "done", iv.done,
                      "data", iv.data, "created", iv.created, "updated", iv.updated));
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        json_decref(out);
        return NULL;
    }
    return out;
}

json_t *store_interv_study(store_t *s, long study_id)
{
    sqlite3_stmt *st = store__prepare(
        s, "SELECT " IV_COLS " FROM interventions WHERE study_id=?1 ORDER BY id");
    if (!st)
        return NULL;
    sqlite3_bind_int64(st, 1, study_id);
    return s_rows(s, st);
}

json_t *store_interv_list(store_t *s, long trial_id)
{
    sqlite3_stmt *st = store__prepare(
        s, "SELECT " IV_COLS " FROM interventions WHERE trial_id=?1 OR "
           "(kind='fork' AND EXISTS (SELECT 1 FROM json_each(interventions.data, "
           "'$.siblings') WHERE json_each.value=?1)) ORDER BY id");
    if (!st)
        return NULL;
    sqlite3_bind_int64(st, 1, trial_id);
    return s_rows(s, st);
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
            !strcmp(json_string_value(json_object_get(x, "kind")),
                    store_iv_kind_name(w->kind)))
            found = x;
    }
    return found;
}

void store_interv_wait_init(store_interv_wait *w, store_t *s, long trial,
                            store_iv_kind kind)
{
    memset(w, 0, sizeof *w);
    w->store = s;
    w->trial = trial;
    w->kind = kind;
    if (!s)
        return;
    json_t *list = store_interv_list(s, trial);
    json_t *iv = list ? s_newest(w, list) : NULL;
    w->after = iv ? (long)json_integer_value(json_object_get(iv, "id")) : 0;
    json_decref(list);
}

json_t *store_interv_wait_check(void *arg)
{
    store_interv_wait *w = arg;
    if (!w->store)
        return NULL;
    json_t *list = store_interv_list(w->store, w->trial);
    json_t *iv = list ? s_newest(w, list) : NULL;
    json_t *out = NULL;
    if (iv && json_integer_value(json_object_get(iv, "id")) > w->after &&
        json_is_true(json_object_get(iv, "done"))) {
        double now = util_now();
        if (!w->final_at)
            w->final_at = now;
        else if (now - w->final_at >= STORE_INTERV_GRACE_S) {
            out = json_pack("{s:s, s:O, s:I, s:O, s:b}", "type", "ok",
                            store_iv_kind_name(w->kind), json_object_get(iv, "state"),
                            "trial", (json_int_t)w->trial, "intervention",
                            json_object_get(iv, "id"), "from_store", 1);
            json_object_update_missing(out, json_object_get(iv, "data"));
        }
    }
    json_decref(list);
    return out;
}
