/*  ctl_due.h - when each trial of a study must next be looked at: a
    binary min-heap of (time, trial) entries, so that the controller's
    periodic pass (ctl__study_tick_trials) handles the trials that are due
    (lost: no word for --lost-timeout; a stop's grace over: the kill) and
    not every trial. With 10 000 running trials the walk over all of them
    every 50 ms was the pass's cost (bench/scale.sh).

    An entry is a check, not a verdict: the pass looks at the trial, acts
    when its condition holds, and schedules the next check (a trial heard
    since then is checked again later). A trial has at most one live
    entry, the one whose time equals its `due_at` while `due_queued`;
    an earlier one a later push replaced is stale and dropped when it
    comes out. Entries borrow the trials: the heap is its study's, and a
    study's trials live as long as the study (ctl_idmap.h).

    Pure (no clock, no store). Out of memory aborts (util_xrealloc, the
    controller's policy in ctl_internal.h).
*/
#ifndef JZ_CTL_DUE_H
#define JZ_CTL_DUE_H

#include <stddef.h>

typedef struct ctl_trial ctl_trial;

typedef struct {
    double at;    /* monotonic time (util_now) the check is due */
    ctl_trial *t; /* borrowed */
} ctl_due_entry;

typedef struct {
    ctl_due_entry *e; /* heap order: e[i].at <= e[2i+1].at, e[2i+2].at */
    size_t n, cap;
} ctl_due;

/* Schedules a check of t at `at` (0: at the next pass), unless one at or
   before `at` is already scheduled. Reads and sets t->due_at and
   t->due_queued; t->study->due is the heap. */
void ctl_due_at(ctl_trial *t, double at);
/* Takes the earliest live entry due before `before`: 1 and *t (its check
   is no longer scheduled), or 0 when none is. Stale entries on the way
   are dropped. */
int ctl_due_pop(ctl_due *q, double before, ctl_trial **t);
/* Live and stale entries held (at most one live per trial). */
size_t ctl_due_size(const ctl_due *q);
/* Frees the heap (not the trials). */
void ctl_due_fini(ctl_due *q);

#endif
