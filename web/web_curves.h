/*  web_curves.h - learning curves of whole studies, downsampled and kept
    up to date in memory for the study page.

    Per study, per trial, per metric, the points of the trial's latest
    attempt are folded into at most WEB_CURVE_BUCKETS step buckets (count,
    mean, min, max, last step, last time); when a step falls past the last
    bucket, the bucket width doubles and neighbours merge. Each call reads
    only the points stored since the previous one (by rowid), so a page
    with 1000 trials x 10 000 points costs one full read, then what is new.

    Each curve keeps its last JSON and gives it again until a point is
    added to it, so a live study re-formats only the curves of its running
    trials.

    Thread-safe (one mutex). Out of memory aborts (the server's policy).
*/
#ifndef JZ_WEB_CURVES_H
#define JZ_WEB_CURVES_H

#include "../store/store.h"
#include "web_buf.h"

#define WEB_CURVE_BUCKETS 256

typedef struct web_curves web_curves_t;

/* Caller owns the result and must destroy it. */
web_curves_t *web_curves_new(void);
void web_curves_destroy(web_curves_t **cp);

/* Reads what is new for study `study_id` from `s` (borrowed), then
   appends to `out` the JSON object {"metric": M, "trials": {"ID": {"t0":
   wall time of the curve's first point, "s": [steps], "y": [means], "t":
   [seconds since t0]}, ...}}, with "lo" and "hi" (each point's min and
   max) too when `band` with at most `points` points per
   trial (2..WEB_CURVE_BUCKETS). 0, or -1 with err on a store error. */
int web_curves_json(web_curves_t *c, store_t *s, long study_id, const char *metric,
                    int points, int band, web_buf *out, char *err, size_t errsize);

/* Names of the metrics seen in the study so far (after the same update):
   a JSON array appended to out. 0 or -1. */
int web_curves_names(web_curves_t *c, store_t *s, long study_id, web_buf *out, char *err,
                     size_t errsize);

/* Reads at most `limit` new points of the study into the cache (the
   server warms its caches at start with this, a slice at a time).
   Returns how many it read (0: up to date), or -1 with err. */
long web_curves_warm(web_curves_t *c, store_t *s, long study_id, long limit, char *err,
                     size_t errsize);

#endif
