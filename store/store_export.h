/*  store_export.h - a study's trials as `jizhi study export` writes them
    (CSV or JSON), shared by the CLI (cli/cmd_study.c) and the web API's
    download (GET /api/studies/NAME/export), so that both give the same
    bytes. The input is the "trials" array of store_study_detail, marked
    by spec_mark_trials for studies with several objectives or
    constraints. */
#ifndef JZ_STORE_EXPORT_H
#define JZ_STORE_EXPORT_H

#include "../common/spec.h"

#include <jansson.h>
#include <stdio.h>

/* 1 for the metrics kept for the schedulers (gradient-noise inputs:
   grad_sqnorm_*, batch_small, batch_big), exported only with --all. */
int store_export_internal(const char *name);

/* Writes one CSV field (quoted when needed) and ',' or, when `last`, '\n'. */
void store_export_field(FILE *f, const char *text, int last);

/* Writes the CSV of `trials` (borrowed): a header, then a row per trial
   with number, id, state, attempt, generation, value, the marks
   (feasible, pareto, best) some trial has, param_X (as now), sampled_X
   (for params changed live) and metric_X (last values; internal ones
   only when `all`). */
void store_export_csv(FILE *f, json_t *trials, int all);

/* Writes `trials` (borrowed) as indented JSON and a newline. */
void store_export_json(FILE *f, const json_t *trials);

/* Marks the trials of `detail` (store_study_detail's answer, borrowed)
   with feasible/pareto/best when its spec has several objectives or
   constraints, as study show and export do. Returns the parsed spec
   then (caller owns it: spec_destroy), else NULL. */
spec_t *store_export_mark(json_t *detail);

#endif
