/*  web_curves.c - downsampled learning curves per study (see web_curves.h). */
#include "web_curves.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAMES 64

typedef struct {
    double step, time, sum; /* last step and time in the bucket; sum of values */
    double lo, hi;
    int n;
} bucket;

typedef struct {
    double width; /* steps per bucket */
    double t0;    /* time of the first point */
    int nb, cap;  /* buckets in use, allocated */
    bucket *b;
    /* the curve's last JSON, given again until a point is added or another
       size is asked for: a live study re-formats only its running trials */
    web_buf json;
    int json_points, json_band; /* what `json` was made for; 0 points: none */
} curve;

typedef struct {
    long id;
    long attempt;
    curve *c[MAX_NAMES]; /* by name index; NULL until a point arrives */
} trial;

typedef struct study {
    long id;
    long after; /* last metrics rowid folded in */
    char *names[MAX_NAMES];
    int nnames;
    trial *trials; /* hash table, open addressing on id */
    size_t ntrials, tcap;
    long *order; /* trial ids in first-seen order */
    struct study *next;
} study;

struct web_curves {
    pthread_mutex_t mu;
    study *studies;
};

static void *s_alloc(size_t n)
{
    void *p = calloc(1, n);
    if (!p)
        abort();
    return p;
}

web_curves_t *web_curves_new(void)
{
    web_curves_t *c = s_alloc(sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

static void s_curves_free(trial *t)
{
    for (int k = 0; k < MAX_NAMES; k++)
        if (t->c[k]) {
            free(t->c[k]->b);
            web_buf_fini(&t->c[k]->json);
            free(t->c[k]);
            t->c[k] = NULL;
        }
}

static void s_study_free(study *st)
{
    for (size_t i = 0; i < st->tcap; i++)
        s_curves_free(&st->trials[i]);
    for (int k = 0; k < st->nnames; k++)
        free(st->names[k]);
    free(st->trials);
    free(st->order);
    free(st);
}

void web_curves_destroy(web_curves_t **cp)
{
    if (!cp || !*cp)
        return;
    web_curves_t *c = *cp;
    while (c->studies) {
        study *n = c->studies->next;
        s_study_free(c->studies);
        c->studies = n;
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
    *cp = NULL;
}

static trial *s_trial(study *st, long id)
{
    if ((st->ntrials + 1) * 2 > st->tcap) {
        size_t ncap = st->tcap ? st->tcap * 2 : 64;
        trial *nt = s_alloc(ncap * sizeof *nt);
        for (size_t i = 0; i < st->tcap; i++) {
            if (!st->trials[i].id)
                continue;
            size_t h = (size_t)st->trials[i].id * 2654435761u % ncap;
            while (nt[h].id)
                h = (h + 1) % ncap;
            nt[h] = st->trials[i];
        }
        free(st->trials);
        st->trials = nt;
        st->tcap = ncap;
        long *no = realloc(st->order, ncap * sizeof *no);
        if (!no)
            abort();
        st->order = no;
    }
    size_t h = (size_t)id * 2654435761u % st->tcap;
    while (st->trials[h].id && st->trials[h].id != id)
        h = (h + 1) % st->tcap;
    if (!st->trials[h].id) {
        st->trials[h].id = id;
        st->trials[h].attempt = -1;
        st->order[st->ntrials++] = id;
    }
    return &st->trials[h];
}

static trial *s_find(const study *st, long id)
{
    if (!st->tcap)
        return NULL;
    size_t h = (size_t)id * 2654435761u % st->tcap;
    while (st->trials[h].id) {
        if (st->trials[h].id == id)
            return &st->trials[h];
        h = (h + 1) % st->tcap;
    }
    return NULL;
}

static int s_name(study *st, const char *name)
{
    for (int k = 0; k < st->nnames; k++)
        if (!strcmp(st->names[k], name))
            return k;
    if (st->nnames == MAX_NAMES)
        return -1;
    st->names[st->nnames] = strdup(name);
    if (!st->names[st->nnames])
        abort();
    return st->nnames++;
}

static void s_merge(bucket *into, const bucket *b)
{
    if (!b->n)
        return;
    if (!into->n) {
        *into = *b;
        return;
    }
    if (b->step >= into->step) {
        into->step = b->step;
        into->time = b->time;
    }
    into->sum += b->sum;
    into->lo = b->lo < into->lo ? b->lo : into->lo;
    into->hi = b->hi > into->hi ? b->hi : into->hi;
    into->n += b->n;
}

static void s_add(curve *cv, double step, double value, double time)
{
    if (step < 0)
        step = 0;
    long idx = (long)(step / cv->width);
    while (idx >= WEB_CURVE_BUCKETS) {
        int nb = (cv->nb + 1) / 2;
        for (int i = 0; i < nb; i++) {
            bucket m = cv->b[2 * i];
            if (2 * i + 1 < cv->nb)
                s_merge(&m, &cv->b[2 * i + 1]);
            cv->b[i] = m;
        }
        memset(cv->b + nb, 0, (size_t)(cv->nb - nb) * sizeof *cv->b);
        cv->nb = nb;
        cv->width *= 2;
        idx = (long)(step / cv->width);
    }
    if (idx >= cv->cap) {
        int cap = cv->cap ? cv->cap : 16;
        while (cap <= idx)
            cap *= 2;
        if (cap > WEB_CURVE_BUCKETS)
            cap = WEB_CURVE_BUCKETS;
        bucket *nbk = realloc(cv->b, (size_t)cap * sizeof *nbk);
        if (!nbk)
            abort();
        memset(nbk + cv->cap, 0, (size_t)(cap - cv->cap) * sizeof *nbk);
        cv->b = nbk;
        cv->cap = cap;
    }
    if (idx >= cv->nb)
        cv->nb = (int)idx + 1;
    bucket one = {step, time, value, value, value, 1};
    if (cv->t0 == 0 || time < cv->t0)
        cv->t0 = time;
    s_merge(&cv->b[idx], &one);
    cv->json_points = 0;
}

static int s_fold(void *arg, const store_metric_row *r)
{
    study *st = arg;
    if (isnan(r->value))
        return 0;
    trial *t = s_trial(st, r->trial_id);
    if (r->attempt < t->attempt)
        return 0;
    if (r->attempt > t->attempt) { /* a new attempt starts its curves afresh */
        s_curves_free(t);
        t->attempt = r->attempt;
    }
    int k = s_name(st, r->name);
    if (k < 0)
        return 0;
    if (!t->c[k]) {
        t->c[k] = s_alloc(sizeof(curve));
        t->c[k]->width = 1;
        web_buf_init(&t->c[k]->json);
    }
    s_add(t->c[k], (double)r->step, r->value, r->time);
    return 0;
}

/* Finds or makes the study's cache and folds in what is new. Locked. */
static study *s_update(web_curves_t *c, store_t *s, long study_id, long limit, long *got,
                       char *err, size_t errsize)
{
    study *st = c->studies;
    while (st && st->id != study_id)
        st = st->next;
    if (!st) {
        st = s_alloc(sizeof *st);
        st->id = study_id;
        st->next = c->studies;
        c->studies = st;
    }
    long n = store_study_points_since(s, study_id, &st->after, limit, s_fold, st);
    if (n < 0) {
        snprintf(err, errsize, "reading metrics: %s", store_errmsg(s));
        return NULL;
    }
    if (got)
        *got = n;
    return st;
}

static void s_format(const curve *cv, int points, int band, web_buf *out)
{
    int used = 0;
    for (int i = 0; i < cv->nb; i++)
        used += cv->b[i].n > 0;
    int group = used <= points ? 1 : (cv->nb + points - 1) / points;
    bucket *g = malloc(((size_t)cv->nb / (size_t)group + 1) * sizeof *g);
    if (!g)
        abort();
    int ng = 0;
    for (int i = 0; i < cv->nb; i += group) {
        bucket m = {0};
        for (int j = i; j < i + group && j < cv->nb; j++)
            s_merge(&m, &cv->b[j]);
        if (m.n)
            g[ng++] = m;
    }
    static const char *const keys[] = {"{\"s\":[", "],\"y\":[", "],\"lo\":[",
                                       "],\"hi\":[", "],\"t\":["};
    for (int f = 0; f < 5; f++) {
        if (!band && (f == 2 || f == 3))
            continue;
        web_buf_str(out, keys[f]);
        for (int i = 0; i < ng; i++) {
            if (i)
                web_buf_add(out, ",", 1);
            double v = f == 0   ? g[i].step
                       : f == 1 ? g[i].sum / g[i].n
                       : f == 2 ? g[i].lo
                       : f == 3 ? g[i].hi
                                : round((g[i].time - cv->t0) * 10) / 10;
            web_buf_num(out, v);
        }
    }
    web_buf_str(out, "]}");
    free(g);
}

/* Appends the curve's JSON, formatting it only when it changed. */
static void s_emit(curve *cv, int points, int band, web_buf *out)
{
    if (cv->json_points != points || cv->json_band != band) {
        cv->json.len = 0;
        s_format(cv, points, band, &cv->json);
        cv->json_points = points;
        cv->json_band = band;
    }
    web_buf_add(out, cv->json.data, cv->json.len);
}

int web_curves_json(web_curves_t *c, store_t *s, long study_id, const char *metric,
                    int points, int band, web_buf *out, char *err, size_t errsize)
{
    if (points < 2)
        points = 2;
    if (points > WEB_CURVE_BUCKETS)
        points = WEB_CURVE_BUCKETS;
    pthread_mutex_lock(&c->mu);
    study *st = s_update(c, s, study_id, 0, NULL, err, errsize);
    if (!st) {
        pthread_mutex_unlock(&c->mu);
        return -1;
    }
    int k = -1;
    for (int i = 0; i < st->nnames; i++)
        if (!strcmp(st->names[i], metric))
            k = i;
    web_buf_str(out, "{\"metric\":");
    web_buf_jstr(out, metric);
    web_buf_str(out, ",\"trials\":{");
    int first = 1;
    for (size_t i = 0; k >= 0 && i < st->ntrials; i++) {
        trial *t = s_find(st, st->order[i]);
        if (!t || !t->c[k])
            continue;
        web_buf_str(out, first ? "\"" : ",\"");
        first = 0;
        web_buf_long(out, t->id);
        web_buf_str(out, "\":");
        s_emit(t->c[k], points, band, out);
    }
    web_buf_str(out, "}}");
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int web_curves_names(web_curves_t *c, store_t *s, long study_id, web_buf *out, char *err,
                     size_t errsize)
{
    pthread_mutex_lock(&c->mu);
    study *st = s_update(c, s, study_id, 0, NULL, err, errsize);
    if (st) {
        web_buf_str(out, "[");
        for (int i = 0; i < st->nnames; i++) {
            if (i)
                web_buf_str(out, ",");
            web_buf_jstr(out, st->names[i]);
        }
        web_buf_str(out, "]");
    }
    pthread_mutex_unlock(&c->mu);
    return st ? 0 : -1;
}

long web_curves_warm(web_curves_t *c, store_t *s, long study_id, long limit, char *err,
                     size_t errsize)
{
    long got = 0;
    pthread_mutex_lock(&c->mu);
    study *st = s_update(c, s, study_id, limit, &got, err, errsize);
    pthread_mutex_unlock(&c->mu);
    return st ? got : -1;
}
