/*  store_internal.h - what the store's own files share and nothing outside
    store/ may include: the store_t itself, its cached statements, and the
    binding and column helpers (defined in store.c).

    Every helper here borrows the statement it is given; none of them
    finalizes it. Column indexes are named beside each SELECT, in the file
    that runs it (an enum of STUDY_C_*, TRIAL_C_*, ...); a one-column
    SELECT (a COUNT, an id) reads its column 0.
*/
#ifndef JZ_STORE_INTERNAL_H
#define JZ_STORE_INTERNAL_H

#include "store.h"

#include <sqlite3.h>
#include <stddef.h>

/* The statements prepared once by store_open (store.c, s_sql). */
enum {
    Q_METRIC_INSERT,
    Q_METRIC_INSERT_MANY, /* STORE_METRIC_ROWS points in one statement */
    Q_TRIAL_SAVE,
    Q_TRIAL_INSERT,
    Q_PARAM_INSERT,
    Q_EVENT_INSERT,
    Q_COUNT
};

struct store {
    sqlite3 *db;
    sqlite3_stmt *q[Q_COUNT]; /* owned; NULL on a read-only store */
    int readonly;
    int write_failed; /* a write of the open transaction failed (store__step) */
    char actor[64];   /* store_set_actor: the events' actor, "" none */
    char err[256];    /* a row the store refused (store__refuse), "" none;
                         cleared by store__prepare */
};

/* Points per multi-row metrics insert (Q_METRIC_INSERT_MANY): one
   statement's start, bindings check and cursor opening for this many
   rows instead of one (store_metrics_add, store_metric.c). */
#define STORE_METRIC_ROWS 64

/* The SQLite handle. Borrowed. */
sqlite3 *store__db(store_t *s);
/* sqlite3_step that remembers a failed write (disk full, I/O error, ...):
   SQLite may then have rolled back part or all of the transaction, so the
   caller's commit must fail too (store_commit). Returns sqlite3_step's code. */
int store__step(store_t *s, sqlite3_stmt *st);
/* Runs a cached statement to completion, then resets it and clears its
   bindings. 0 when it ran to SQLITE_DONE, else -1. */
int store__run(store_t *s, sqlite3_stmt *st);
/* A statement prepared per call: caller finalizes it. NULL on error
   (store_errmsg tells why). */
sqlite3_stmt *store__prepare(store_t *s, const char *sql);
/* Runs a statement from store__prepare to completion and finalizes it
   (the per-call store__run). 0 when it ran to SQLITE_DONE, else -1. */
int store__exec(store_t *s, sqlite3_stmt *st);

/* The statements store_trials_page and store_trial_counts prepare (static
   text), for the tests that check their query plans: the page's for
   (desc, filtered: a state filter), and the per-state counts'. */
const char *store__page_sql(int desc, int filtered);
const char *store__counts_sql(void);

/* Records why a row read was refused (store_errmsg shows it until the
   next store__prepare). Returns -1. */
int store__refuse(store_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The state column's text as a state: 0, or -1 (store__refuse) when the
   text names no state; the message names the row: trial `trial_id`, or
   study `name`. */
int store__col_trial_state(store_t *s, sqlite3_stmt *st, int i, long trial_id,
                           store_trial_state *out);
int store__col_study_state(store_t *s, sqlite3_stmt *st, int i, const char *name,
                           store_study_state *out);

/* Makes room at index n of the growing array *arrayp (arrayp is the
   address of a T *, size is sizeof(T), *cap its capacity): allocates 8
   when *arrayp is NULL, doubles it when n reaches *cap. 0, or -1 when
   memory runs out, leaving *arrayp and *cap as they were (the caller
   still owns and frees it). */
int store__reserve(void *arrayp, long *cap, long n, size_t size);

/* Binds x, or NULL when x is NaN. */
void store__bind_double(sqlite3_stmt *st, int i, double x);
/* Binds an objective value: wire_none() as NULL, NaN as the text 'nan'. */
void store__bind_value(sqlite3_stmt *st, int i, double x);
/* Binds text, leaving the parameter NULL when text is NULL or "". */
void store__bind_text_or_null(sqlite3_stmt *st, int i, const char *text);
/* Binds parameter i to v as JSON text (text_json_dumps with `flags`); when
   v is NULL or cannot be written, to `dflt` (NULL: SQL NULL). */
void store__bind_json(sqlite3_stmt *st, int i, const json_t *v, size_t flags,
                      const char *dflt);

/* Column i as a double, NaN when NULL. */
double store__col_double(sqlite3_stmt *st, int i);
/* Column i as a long, -1 when NULL (trials.parent, last_step). */
long store__col_id(sqlite3_stmt *st, int i);

/* The columns of a metric point as the incremental reads give it
   (store_metric_row, store.h): select them first, in this order. */
#define STORE_MROW_COLS "rowid, trial_id, attempt, step, name, value, time"
/* Calls fn per row of st (STORE_MROW_COLS first), *after taking each
   row's rowid when given, and finalizes st. The count of rows given, or
   -1 on a read error. */
long store__metric_rows(store_t *s, sqlite3_stmt *st, long *after, store_row_fn fn,
                        void *arg);
/* Column i copied into buf ("" when NULL), truncated to size. */
void store__col_text(sqlite3_stmt *st, int i, char *buf, size_t size);
/* Column i parsed as JSON; NULL when NULL or not JSON. Caller owns. */
json_t *store__col_json(sqlite3_stmt *st, int i);
/* An objective value column (trials.value, last_value, best_value) as
   stored by store_trial_save: NULL is wire_none(), the text 'nan' NaN. */
double store__col_value(sqlite3_stmt *st, int i);
/* A time or latency as JSON: null when NaN. Caller owns. */
json_t *store__num_or_null(double x);
/* The params of trial_id's generation as {name: value} (an empty object
   when none or on a read error). Caller owns. */
json_t *store__params_of(store_t *s, long trial_id, long generation);

#endif
