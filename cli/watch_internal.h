/*  watch_internal.h - what the three files of `jizhi watch` share, and
    nothing else includes: the view's state (w_view, its trials w_trial)
    and the functions each file gives the others.

    cmd_watch.c    the command: options, the loops (terminal and plain
                   lines), keys, requests to the controller
    watch_model.c  the model: the study and its trials read from the store
                   or the controller, metric points, sort order, progress
    watch_view.c   the view: the ncurses screen and the text both views
                   print (parameters, numbers)

    The UI is one thread; nothing here locks. A w_view owns its trials,
    their params, its order array, its spec and its socket.
*/
#ifndef JZ_WATCH_INTERNAL_H
#define JZ_WATCH_INTERNAL_H

#include "cli.h"

#include "../common/spec.h"

#define W_SERIES_CAP 256 /* objective points kept per trial (downsampled) */
#define W_MAX_NAMES 32   /* metric names tracked per study */
#define W_SPARK 16       /* sparkline width in cells */
#define W_MAX_PENDING 16 /* requests in flight to the controller */
#define W_REQ_TIMEOUT 30.0

typedef struct {
    long id;
    int have_row; /* the trial row has been read */
    long number, attempt, last_step;
    int state;      /* a store_trial_state; -1 none known (text only from the
                       controller's answer and in the output) */
    json_t *params; /* owned, NULL before the row */
    double value, started, ended;
    long m_attempt;               /* attempt the metrics below belong to */
    long m_step;                  /* last step reported, -1 none */
    double mval[W_MAX_NAMES + 1]; /* last value per name index; [W_MAX_NAMES] objective */
    float series[W_SERIES_CAP];   /* objective, one slot per `stride` points */
    int nseries, stride, slot_fill;
    int shown_state;         /* state last printed in line mode, -1 none */
    int paused;              /* this view's pause was acknowledged (no resume since) */
    int mark;                /* on the Pareto set (several objectives) or the best
                                feasible trial (constraints): spec_mark_trials */
    int infeasible;          /* completed but breaks a constraint */
    char lineage[256];       /* guarded changes and forks, in words, "" none */
    char tag[32];            /* the same, short, for the row */
    char shown_lineage[256]; /* last lineage printed in line mode */
} w_trial;

typedef struct {
    long req, trial;
    char what[160];
    double sent;
} w_pending;

typedef struct {
    const char *db, *controller, *name;
    double interval;
    store_t *s;
    long study_id;
    int study_state; /* a store_study_state; -1 none known */
    double created, finished;
    char metric[64]; /* objective metric */
    int maximize;
    spec_t *spec;    /* parsed when the study has several objectives or
                        constraints (for the marks), else NULL; owned */
    long budget;     /* budget.trials, 0 when unknown */
    long after;      /* metrics rowid read up to */
    w_trial *trials; /* by id, unordered */
    long ntrials, cap;
    long *order; /* indexes of trials with rows, by number */
    long norder;
    long cache; /* last trial index hit */
    char names[W_MAX_NAMES][64];
    int nnames;
    int utf8;
    /* interactive state */
    long sel_id, top;
    enum { W_NORMAL, W_EDIT, W_CONFIRM } mode;
    char action[16]; /* stop, pause, resume, set */
    char edit[128];
    char status[256];
    char warning[512]; /* the study's latest warning event, "" when none */
    cli_src src;       /* remote reads (--controller) when src.s is NULL */
    enum { W_BY_ID, W_BY_OBJECTIVE, W_BY_STATE, W_SORTS } sort; /* key o cycles */
    void *zctx, *sock;
    long next_req;
    w_pending pending[W_MAX_PENDING];
    int npending;
} w_view;

typedef struct {
    long done, running, failed, pending, total;
    const w_trial *best;
    double elapsed;
} w_progress;

/* ---- the model (watch_model.c) ---- */

/* The trial with this id, added (empty, no row yet) when not known.
   Borrowed, valid until the next call; NULL when memory runs out. */
w_trial *cli__watch_trial(w_view *v, long id);
/* Index of a metric name in v->names, adding it; W_MAX_NAMES for the
   objective; -1 when the table is full. */
int cli__watch_name_index(w_view *v, const char *name);
/* Reads what changed since the last refresh (the study row, the trials,
   new metric points) from the store or, without one, the controller; then
   orders and marks the trials. 0, or -1 with a message in err. */
int cli__watch_load(w_view *v, char *err, size_t errsize);
/* Sorts v->order by v->sort; the sort's name ("id", "objective", "state"). */
void cli__watch_sort(w_view *v);
const char *cli__watch_sort_name(const w_view *v);
/* The name of a trial's state (t->state) and of the study's (v->study_state):
   "?" when none is known (static). */
const char *cli__watch_state_name(const w_trial *t);
const char *cli__watch_study_state_name(const w_view *v);
/* The study's progress over the trials with rows; p->best borrowed. */
void cli__watch_progress(const w_view *v, w_progress *p);

/* ---- the view (watch_view.c) ---- */

/* "k=v k=v" of a params object (NULL: ""), sorted by key, into buf. */
void cli__watch_params_text(const json_t *params, char *buf, size_t size);
/* A value with 5 significant digits, "-" for none, into buf. */
void cli__watch_num(double x, char *buf, size_t size);
/* The colour pairs of the screen (after initscr). */
void cli__watch_colors(void);
/* Draws the whole screen from v (keeps v->top in range). */
void cli__watch_draw(w_view *v);
/* The selected trial (and its place in v->order in *index); NULL none. */
const w_trial *cli__watch_selected(const w_view *v, long *index);
/* Keeps a valid selection: the first running trial, else the first. */
void cli__watch_fix_selection(w_view *v);
/* Moves the selection by delta rows, clamped to the table. */
void cli__watch_move(w_view *v, long delta);

#endif
