/*  spec_alert.c - the alert rules of a spec ("alerts") and of the
    controller's --alerts file, and the queue fields' names (priority).
    See spec.h and docs/spec.md (Alerts, Queue).

    A rule:
      {"on": "trial_failed" | "failures_in_a_row" | "guard" | "stalled"
             | "best_improved" | "study_finished",
       "name": "...",            optional identity (default "<on>#<index>")
       "count": N,               failures_in_a_row: required, >= 1
       "stop_study": true,       failures_in_a_row: also stop the study
       "seconds": T,             stalled: required, > 0
       "hook": ["prog", "arg"],  optional: run with the alert as JSON on stdin
       "hook_timeout_s": S}      optional, > 0, default 30
*/
#include "spec.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const s_on[SPEC_ALERT_COUNT] = {
    [SPEC_ALERT_TRIAL_FAILED] = "trial_failed",
    [SPEC_ALERT_FAILURES] = "failures_in_a_row",
    [SPEC_ALERT_GUARD] = "guard",
    [SPEC_ALERT_STALLED] = "stalled",
    [SPEC_ALERT_BEST] = "best_improved",
    [SPEC_ALERT_FINISHED] = "study_finished",
};

static const char *const s_prio[] = {
    [SPEC_PRIO_LOW] = "low", [SPEC_PRIO_NORMAL] = "normal", [SPEC_PRIO_HIGH] = "high"};

const char *spec_priority_name(int priority)
{
    return priority >= SPEC_PRIO_LOW && priority <= SPEC_PRIO_HIGH ? s_prio[priority]
                                                                   : "invalid";
}

int spec_priority_parse(const char *text)
{
    return util_name_index(s_prio, SPEC_PRIO_HIGH + 1, text);
}

const char *spec_alert_on_name(spec_alert_on on)
{
    return (unsigned)on < SPEC_ALERT_COUNT ? s_on[on] : "invalid";
}

spec_alert_on spec_alert_kind(const json_t *rule)
{
    int i = util_name_index(s_on, SPEC_ALERT_COUNT,
                            json_string_value(json_object_get(rule, "on")));
    return i >= 0 ? (spec_alert_on)i : SPEC_ALERT_COUNT;
}

const char *spec_alert_id(const json_t *rule, size_t i, char *buf, size_t size)
{
    const char *name = json_string_value(json_object_get(rule, "name"));
    if (name)
        snprintf(buf, size, "%s", name);
    else
        snprintf(buf, size, "%s#%zu", spec_alert_on_name(spec_alert_kind(rule)), i);
    return buf;
}

static int s_fail(spec_error *err, const char *path, size_t i, const char *key,
                  const char *fmt, ...)
{
    snprintf(err->field, sizeof err->field, "%s[%zu]%s%s", path, i, key ? "." : "",
             key ? key : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof err->text, fmt, ap);
    va_end(ap);
    return -1;
}

/* 1 when key k is allowed for a rule on `on`. */
static int s_key_allowed(const char *k, spec_alert_on on)
{
    if (!strcmp(k, "on") || !strcmp(k, "name") || !strcmp(k, "hook") ||
        !strcmp(k, "hook_timeout_s"))
        return 1;
    if (on == SPEC_ALERT_FAILURES)
        return !strcmp(k, "count") || !strcmp(k, "stop_study");
    if (on == SPEC_ALERT_STALLED)
        return !strcmp(k, "seconds");
    return 0;
}

int spec_alerts_check(json_t *alerts, const char *path, spec_error *err)
{
    if (!json_is_array(alerts)) {
        snprintf(err->field, sizeof err->field, "%s", path);
        snprintf(err->text, sizeof err->text, "must be an array of rules");
        return -1;
    }
    if (json_array_size(alerts) > 100) {
        snprintf(err->field, sizeof err->field, "%s", path);
        snprintf(err->text, sizeof err->text, "at most 100 rules");
        return -1;
    }
    size_t i;
    json_t *r;
    json_array_foreach(alerts, i, r)
    {
        if (!json_is_object(r))
            return s_fail(err, path, i, NULL, "must be an object");
        json_t *on = json_object_get(r, "on");
        spec_alert_on kind = spec_alert_kind(r);
        if (!json_is_string(on) || kind == SPEC_ALERT_COUNT)
            return s_fail(err, path, i, "on",
                          "%s (expected one of: trial_failed, failures_in_a_row, guard, "
                          "stalled, best_improved, study_finished)",
                          on ? "unknown event" : "missing (required)");
        const char *k;
        json_t *v;
        json_object_foreach(r, k, v)
        {
            if (!s_key_allowed(k, kind))
                return s_fail(err, path, i, k, "not a field of a rule on %s",
                              spec_alert_on_name(kind));
        }
        json_t *name = json_object_get(r, "name");
        if (name && (!json_is_string(name) || !*json_string_value(name) ||
                     strlen(json_string_value(name)) > 64 ||
                     strchr(json_string_value(name), '#')))
            return s_fail(err, path, i, "name", "must be 1-64 characters, without '#'");
        if (name) /* names are identities: no two rules share one */
            for (size_t j = 0; j < i; j++)
                if (json_equal(name, json_object_get(json_array_get(alerts, j), "name")))
                    return s_fail(err, path, i, "name",
                                  "\"%s\" is already the name of "
                                  "rule %zu",
                                  json_string_value(name), j);
        json_t *count = json_object_get(r, "count");
        if (kind == SPEC_ALERT_FAILURES &&
            (!json_is_integer(count) || json_integer_value(count) < 1 ||
             json_integer_value(count) > 1000000))
            return s_fail(err, path, i, "count",
                          count ? "must be an integer from 1 to 1000000"
                                : "missing (required for failures_in_a_row)");
        json_t *stop = json_object_get(r, "stop_study");
        if (stop && !json_is_boolean(stop))
            return s_fail(err, path, i, "stop_study", "must be true or false");
        json_t *sec = json_object_get(r, "seconds");
        if (kind == SPEC_ALERT_STALLED &&
            (!json_is_number(sec) || !(json_number_value(sec) > 0) ||
             json_number_value(sec) > 1e7))
            return s_fail(err, path, i, "seconds",
                          sec ? "must be a number of seconds > 0"
                              : "missing (required for stalled)");
        json_t *hook = json_object_get(r, "hook");
        if (hook) {
            if (!json_is_array(hook) || json_array_size(hook) == 0 ||
                json_array_size(hook) > 64)
                return s_fail(err, path, i, "hook",
                              "must be a non-empty array of strings (program and "
                              "arguments, no shell)");
            size_t j;
            json_t *a;
            json_array_foreach(hook, j, a)
            {
                if (!json_is_string(a) || (j == 0 && !*json_string_value(a))) {
                    char key[32];
                    snprintf(key, sizeof key, "hook[%zu]", j);
                    return s_fail(err, path, i, key, "must be a%s string",
                                  j == 0 ? " non-empty" : "");
                }
            }
        }
        json_t *to = json_object_get(r, "hook_timeout_s");
        if (to && (!json_is_number(to) || !(json_number_value(to) > 0) ||
                   json_number_value(to) > 86400))
            return s_fail(err, path, i, "hook_timeout_s",
                          "must be a number of seconds, > 0 and at most 86400");
    }
    return 0;
}

json_t *spec_alerts_file(json_t *doc, const char *path, char *err, size_t errsize)
{
    /* {"alerts": [...]} or the array itself */
    json_t *rules = json_is_object(doc) ? json_object_get(doc, "alerts") : doc;
    if (json_is_object(doc) && json_object_size(doc) != 1) {
        snprintf(err, errsize,
                 "--alerts %s: expected {\"alerts\": [rules]} and nothing else", path);
        return NULL;
    }
    if (!rules) {
        snprintf(err, errsize, "--alerts %s: alerts: missing (required)", path);
        return NULL;
    }
    spec_error serr;
    if (spec_alerts_check(rules, "alerts", &serr) != 0) {
        char buf[400];
        snprintf(err, errsize, "--alerts %s: %s", path,
                 spec_strerror(&serr, buf, sizeof buf));
        return NULL;
    }
    return json_incref(rules);
}
