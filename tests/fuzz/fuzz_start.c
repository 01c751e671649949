/*  fuzz_start.c - libFuzzer target: any bytes as the body of a `start` (and
    a `kill`) from the controller, decoded as the dispatcher decodes them.

    The body is parsed as wire_recv parses it (JSON, duplicate keys
    refused; JSON_ALLOW_NUL too, so strings with NUL bytes reach the
    parser), then given to disp__parse_start and disp__parse_kill
    (dispatcher/disp_msg.c). A refusal must say why; an accepted start
    must hold what disp_int.h promises (ids >= 0, a non-empty study, argv
    a non-empty array of NUL-free strings, gpus and ranks in range) and
    go on through what the dispatcher does next with it: the log folder
    name (disp__path_component) and the trial's environment
    (disp__build_env). Build and run: `make fuzz`. */
#include "dispatcher/disp_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void s_check_start(const disp__start *st)
{
    if (st->trial < 0 || st->attempt < 0 || !st->study || !st->study[0])
        __builtin_trap();
    if (!json_is_array(st->argv) || json_array_size(st->argv) == 0)
        __builtin_trap();
    for (size_t i = 0; i < json_array_size(st->argv); i++) {
        const json_t *a = json_array_get(st->argv, i);
        if (!json_is_string(a) || strlen(json_string_value(a)) != json_string_length(a))
            __builtin_trap();
    }
    if (!json_string_value(json_array_get(st->argv, 0))[0])
        __builtin_trap();
    if (st->gpus < 0 || st->ranks < 1 || st->ranks > DISP_MAX_RANKS || st->timeout_s < 0)
        __builtin_trap();
    if (st->env && !json_is_object(st->env))
        __builtin_trap();
    if (st->log_dir && !st->log_dir[0])
        __builtin_trap();
    if (strlen(st->tag) > IDENT_TAG_LEN)
        __builtin_trap();

    char *comp = disp__path_component(st->study);
    if (!comp || !comp[0] || comp[0] == '.' || strchr(comp, '/'))
        __builtin_trap();
    free(comp);

    disp__spawn_args a = {
        st, "/nonexistent", "ipc:///nonexistent", "/nonexistent/ck", "fuzz", "",
        0,  "none"};
    char **env = disp__build_env(&a);
    if (!env)
        __builtin_trap();
    for (char **p = env; *p; p++)
        if (!strchr(*p, '='))
            __builtin_trap();
    disp__strv_free(env);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *m = json_loadb((const char *)data, size,
                           JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
    if (!m)
        return 0;
    char err[256];
    disp__start st;
    int have_ids = -1;
    err[0] = 0;
    if (disp__parse_start(m, &st, &have_ids, err, sizeof err) == 0)
        s_check_start(&st);
    else if (!err[0] || (have_ids != 0 && have_ids != 1))
        __builtin_trap(); /* a refusal always says why */

    long trial, attempt;
    const char *reason;
    err[0] = 0;
    if (disp__parse_kill(m, &trial, &attempt, &reason, err, sizeof err) == 0) {
        if (trial < 0 || attempt < -1 || (reason && strlen(reason) > (size_t)1 << 30))
            __builtin_trap();
    } else if (!err[0]) {
        __builtin_trap();
    }
    json_decref(m);
    return 0;
}
