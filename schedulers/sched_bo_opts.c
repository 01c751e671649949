/*  sched_bo_opts.c - the bo scheduler's options (sched_bo.h lists them):
    their defaults and their checks, with a message naming the key.
*/
#include "sched_bo_job.h"

#include <stdio.h>
#include <string.h>

static int s_fail(char *err, size_t errsize, const char *key, const char *text)
{
    snprintf(err, errsize, "scheduler.%s: %s", key, text);
    return -1;
}

int sched__bo_options(bo_opts *o, const spec_t *spec, char *err, size_t errsize)
{
    const char *key;
    json_t *v;
    o->acq = 0;
    o->kappa = 1.96;
    o->fantasy = BO_BELIEVER;
    o->warp = BO_WARP_AUTO;
    o->fidelity = BO_FID_JOINT; /* bench-mf: see docs/bench.md */
    o->cmodel = BO_CON_POF;
    o->momodel = BO_MO_EHVI;
    o->prior = GP_PRIOR_WALL;
    o->local = 0.3; /* bench-bo: see docs/bench.md */
    o->rugged = BO_RUGGED_AUTO;
    o->large_n = BO_LARGE_N;
    o->large_rule = BO_LARGE_BEST;
    o->large_first = BO_LARGE_FIRST;
    long np = (long)spec->nparams;
    o->n_init = np * 2 < 5 ? 5 : np * 2 > 10 ? 10 : np * 2;
    if (!spec->sched_opts)
        return 0;
    json_object_foreach(spec->sched_opts, key, v)
    {
        if (!strcmp(key, "type") || !strcmp(key, "seed"))
            continue;
        if (!strcmp(key, "acq")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "ei") && strcmp(a, "ucb")))
                return s_fail(err, errsize, key, "must be \"ei\" or \"ucb\"");
            o->acq = !strcmp(a, "ucb");
        } else if (!strcmp(key, "kappa")) {
            if (!json_is_number(v) || !(json_number_value(v) >= 0) ||
                json_number_value(v) > 100)
                return s_fail(err, errsize, key, "must be a number from 0 to 100");
            o->kappa = json_number_value(v);
        } else if (!strcmp(key, "n_init")) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 ||
                json_integer_value(v) > 100000)
                return s_fail(err, errsize, key, "must be an integer from 1 to 100000");
            o->n_init = (long)json_integer_value(v);
        } else if (!strcmp(key, "fantasy")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "believer") && strcmp(a, "liar")))
                return s_fail(err, errsize, key, "must be \"believer\" or \"liar\"");
            o->fantasy = !strcmp(a, "liar") ? BO_LIAR : BO_BELIEVER;
        } else if (!strcmp(key, "constraint_model")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "pof") && strcmp(a, "penalty")))
                return s_fail(err, errsize, key, "must be \"pof\" or \"penalty\"");
            o->cmodel = !strcmp(a, "penalty") ? BO_CON_PENALTY : BO_CON_POF;
        } else if (!strcmp(key, "mo")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "ehvi") && strcmp(a, "parego")))
                return s_fail(err, errsize, key, "must be \"ehvi\" or \"parego\"");
            o->momodel = !strcmp(a, "parego") ? BO_MO_PAREGO : BO_MO_EHVI;
        } else if (!strcmp(key, "lengthscale_prior")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "wall") && strcmp(a, "lognormal")))
                return s_fail(err, errsize, key, "must be \"wall\" or \"lognormal\"");
            o->prior = !strcmp(a, "lognormal") ? GP_PRIOR_LOGNORMAL : GP_PRIOR_WALL;
        } else if (!strcmp(key, "warp")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "auto") && strcmp(a, "power") && strcmp(a, "halfrank") &&
                       strcmp(a, "none")))
                return s_fail(err, errsize, key,
                              "must be \"auto\", \"power\", \"halfrank\" or \"none\"");
            o->warp = !strcmp(a, "none")       ? BO_WARP_NONE
                      : !strcmp(a, "halfrank") ? BO_WARP_HALFRANK
                      : !strcmp(a, "power")    ? BO_WARP_POWER
                                               : BO_WARP_AUTO;
        } else if (!strcmp(key, "local")) {
            if (!json_is_number(v) || !(json_number_value(v) >= 0) ||
                json_number_value(v) > 1)
                return s_fail(err, errsize, key,
                              "must be a number from 0 to 1 (the fraction of "
                              "budget.trials at the end searched locally; 0: never)");
            o->local = json_number_value(v);
        } else if (!strcmp(key, "fidelity")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "rungs") && strcmp(a, "final") && strcmp(a, "joint")))
                return s_fail(err, errsize, key,
                              "must be \"joint\", \"rungs\" or \"final\"");
            o->fidelity = !strcmp(a, "final")   ? BO_FID_FINAL
                          : !strcmp(a, "rungs") ? BO_FID_RUNGS
                                                : BO_FID_JOINT;
        } else if (!strcmp(key, "rugged")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "auto") && strcmp(a, "off")))
                return s_fail(err, errsize, key, "must be \"auto\" or \"off\"");
            o->rugged = !strcmp(a, "off") ? BO_RUGGED_OFF : BO_RUGGED_AUTO;
        } else if (!strcmp(key, "large_n")) {
            if (!json_is_integer(v) || json_integer_value(v) < 100 ||
                json_integer_value(v) > 5000)
                return s_fail(err, errsize, key,
                              "must be an integer from 100 to 5000 (the most finished "
                              "trials one fit uses)");
            o->large_n = (int)json_integer_value(v);
        } else if (!strcmp(key, "large_subset")) {
            const char *a = json_string_value(v);
            if (!a || (strcmp(a, "best") && strcmp(a, "nearest")))
                return s_fail(err, errsize, key, "must be \"best\" or \"nearest\"");
            o->large_rule = !strcmp(a, "nearest") ? BO_LARGE_NEAREST : BO_LARGE_BEST;
        } else if (!strcmp(key, "large_first")) {
            if (!json_is_number(v) || !(json_number_value(v) > 0) ||
                json_number_value(v) > 1)
                return s_fail(err, errsize, key,
                              "must be a number above 0 and at most 1 (the share of "
                              "large_n picked by large_subset; the rest at random)");
            o->large_first = json_number_value(v);
        } else {
            return s_fail(
                err, errsize, key,
                "unknown option for the bo scheduler (expected type, seed, acq, kappa, "
                "n_init, fantasy, warp, constraint_model, lengthscale_prior, mo, "
                "fidelity, local, rugged, large_n, large_subset, large_first)");
        }
    }
    return 0;
}
