/*  ctl_due.c - the per-study heap of trial checks (see ctl_due.h). */
#include "ctl_due.h"

#include "../common/util.h"
#include "ctl_types.h"

#include <stdlib.h>

static void s_swap(ctl_due_entry *a, ctl_due_entry *b)
{
    ctl_due_entry x = *a;
    *a = *b;
    *b = x;
}

static void s_up(ctl_due *q, size_t i)
{
    while (i > 0 && q->e[(i - 1) / 2].at > q->e[i].at) {
        s_swap(&q->e[(i - 1) / 2], &q->e[i]);
        i = (i - 1) / 2;
    }
}

static void s_down(ctl_due *q, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < q->n && q->e[l].at < q->e[m].at)
            m = l;
        if (r < q->n && q->e[r].at < q->e[m].at)
            m = r;
        if (m == i)
            return;
        s_swap(&q->e[m], &q->e[i]);
        i = m;
    }
}

void ctl_due_at(ctl_trial *t, double at)
{
    if (t->due_queued && t->due_at <= at)
        return;
    ctl_due *q = &t->study->due;
    if (q->n == q->cap) {
        q->cap = q->cap ? q->cap * 2 : 64;
        q->e = util_xrealloc(q->e, q->cap * sizeof *q->e);
    }
    q->e[q->n] = (ctl_due_entry){.at = at, .t = t};
    s_up(q, q->n++);
    t->due_at = at;
    t->due_queued = 1;
}

int ctl_due_pop(ctl_due *q, double before, ctl_trial **t)
{
    while (q->n && q->e[0].at < before) {
        ctl_due_entry top = q->e[0];
        q->e[0] = q->e[--q->n];
        s_down(q, 0);
        if (top.t->due_queued && top.t->due_at == top.at) { /* live, not stale */
            top.t->due_queued = 0;
            *t = top.t;
            return 1;
        }
    }
    return 0;
}

size_t ctl_due_size(const ctl_due *q)
{
    return q->n;
}

void ctl_due_fini(ctl_due *q)
{
    free(q->e);
    q->e = NULL;
    q->n = q->cap = 0;
}
