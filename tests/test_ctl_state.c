/*  test_ctl_state.c - the controller's trial and study state machines,
    without sockets.

    1. The transition tables against the diagrams (controller/ctl_state.h),
       written out here a second time: every pair of states
       is checked, so a move added or dropped on one side fails.
    2. Every legal move applied through ctl_trial_move; an illegal one is
       a programmer error (assert: the child aborts, or with asserts off
       the move is refused and nothing changes).
    3. Commands a message asks for are refused in the states that do not
       allow them (ctl_trial_cmd_refusal).
    4. A whole lifecycle through the controller's own functions on a real
       SQLite store with a hand-made ctl (no socket, no event loop; the
       outbox is read instead): start, run, pause, resume, release,
       suspend, unsuspend, retry, failure, stop, study stop and resume
       (the persisted study_stopped field), load restart, completion.
    5. The trial id map: every id found, absent ones not, growth.
    7. Dispatchers by name (a sorted index beside the registration
       order): every name found after adds in any order and removals.
    6. A study's per-state trial counts match its trials after every
       move of the lifecycle (4.).
*/
#include "jz_test.h"

#include "common/log.h"
#include "common/util.h"
#include "controller/ctl.h"
#include "controller/ctl_internal.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- 1. the tables ---- */

typedef struct {
    int from, to;
} move;

static const move s_trial_moves[] = {
    {TRIAL_PENDING, TRIAL_STARTING},  {TRIAL_PENDING, TRIAL_FAILED},
    {TRIAL_PENDING, TRIAL_STOPPED},   {TRIAL_STARTING, TRIAL_RUNNING},
    {TRIAL_STARTING, TRIAL_PENDING},  {TRIAL_STARTING, TRIAL_COMPLETED},
    {TRIAL_STARTING, TRIAL_FAILED},   {TRIAL_STARTING, TRIAL_STOPPED},
    {TRIAL_RUNNING, TRIAL_PAUSED},    {TRIAL_RUNNING, TRIAL_SUSPENDED},
    {TRIAL_RUNNING, TRIAL_PENDING},   {TRIAL_RUNNING, TRIAL_COMPLETED},
    {TRIAL_RUNNING, TRIAL_FAILED},    {TRIAL_RUNNING, TRIAL_STOPPED},
    {TRIAL_PAUSED, TRIAL_RUNNING},    {TRIAL_PAUSED, TRIAL_SUSPENDED},
    {TRIAL_PAUSED, TRIAL_PENDING},    {TRIAL_PAUSED, TRIAL_COMPLETED},
    {TRIAL_PAUSED, TRIAL_FAILED},     {TRIAL_PAUSED, TRIAL_STOPPED},
    {TRIAL_SUSPENDED, TRIAL_PENDING}, {TRIAL_SUSPENDED, TRIAL_STOPPED},
    {TRIAL_STOPPED, TRIAL_PENDING},   {TRIAL_STARTING, TRIAL_PRUNED},
    {TRIAL_RUNNING, TRIAL_PRUNED},    {TRIAL_PAUSED, TRIAL_PRUNED},
};

static const move s_plan_moves[] = {
    {PLAN_NONE, PLAN_STOP},
    {PLAN_NONE, PLAN_RELEASE_CHECKPOINT},
    {PLAN_NONE, PLAN_RESTART},
    {PLAN_RELEASE_CHECKPOINT, PLAN_RELEASE},
    {PLAN_RELEASE_CHECKPOINT, PLAN_STOP},
    {PLAN_RESTART, PLAN_STOP},
    /* and every plan back to NONE */
    {PLAN_NONE, PLAN_NONE},
    {PLAN_RELEASE_CHECKPOINT, PLAN_NONE},
    {PLAN_RELEASE, PLAN_NONE},
    {PLAN_STOP, PLAN_NONE},
    {PLAN_RESTART, PLAN_NONE},
};

static const move s_study_moves[] = {
    {STUDY_RUNNING, STUDY_STOPPED},
    {STUDY_STOPPED, STUDY_RUNNING},
    {STUDY_RUNNING, STUDY_FINISHED},
    {STUDY_FINISHED, STUDY_RUNNING}, /* study extend */
};

static int s_listed(const move *m, size_t n, int from, int to)
{
    for (size_t i = 0; i < n; i++)
        if (m[i].from == from && m[i].to == to)
            return 1;
    return 0;
}

#define N(a) (sizeof a / sizeof a[0])

TEST(the_tables_match_the_diagrams)
{
    int legal = 0;
    for (int f = 0; f < TRIAL_STATE_COUNT; f++)
        for (int t = 0; t < TRIAL_STATE_COUNT; t++) {
            int want = s_listed(s_trial_moves, N(s_trial_moves), f, t);
            if (ctl_trial_move_legal(f, t) != want)
                JZT_FAIL("trial %s -> %s: legal %d, expected %d",
                         store_trial_state_name(f), store_trial_state_name(t),
                         ctl_trial_move_legal(f, t), want);
            legal += want;
        }
    CHECK(legal == (int)N(s_trial_moves));
    for (int f = 0; f < PLAN_COUNT; f++)
        for (int t = 0; t < PLAN_COUNT; t++)
            if (ctl_trial_plan_legal(f, t) !=
                s_listed(s_plan_moves, N(s_plan_moves), f, t))
                JZT_FAIL("plan %s -> %s", ctl_trial_plan_name(f), ctl_trial_plan_name(t));
    for (int f = 0; f < STUDY_STATE_COUNT; f++)
        for (int t = 0; t < STUDY_STATE_COUNT; t++)
            if (ctl_study_move_legal(f, t) !=
                s_listed(s_study_moves, N(s_study_moves), f, t))
                JZT_FAIL("study %s -> %s", store_study_state_name(f),
                         store_study_state_name(t));
    /* out of range is never legal */
    CHECK(!ctl_trial_move_legal(TRIAL_STATE_COUNT, TRIAL_PENDING));
    CHECK(!ctl_trial_move_legal(TRIAL_PENDING, (store_trial_state)-1));
    CHECK(!ctl_trial_plan_legal(PLAN_COUNT, PLAN_NONE));
}

TEST(state_names_round_trip)
{
    for (int i = 0; i < TRIAL_STATE_COUNT; i++) {
        store_trial_state back = TRIAL_STATE_COUNT;
        CHECK(store_trial_state_parse(store_trial_state_name(i), &back) == 0 &&
              (int)back == i);
    }
    for (int i = 0; i < STUDY_STATE_COUNT; i++) {
        store_study_state back = STUDY_STATE_COUNT;
        CHECK(store_study_state_parse(store_study_state_name(i), &back) == 0 &&
              (int)back == i);
    }
    store_trial_state st;
    CHECK(store_trial_state_parse("Running", &st) == -1);
    CHECK(store_trial_state_parse("", &st) == -1);
    CHECK(store_trial_state_parse(NULL, &st) == -1);
    CHECK_STR(store_trial_state_name(TRIAL_STATE_COUNT), "invalid");
    CHECK_STR(store_trial_state_name(TRIAL_SUSPENDED), "suspended");
    CHECK_STR(store_study_state_name(STUDY_FINISHED), "finished");
}

/* ---- 2. moves on a trial object ---- */

TEST(every_legal_move_applies)
{
    for (size_t i = 0; i < N(s_trial_moves); i++) {
        ctl_trial t = {.row = {.id = 1, .state = s_trial_moves[i].from}};
        CHECK(ctl_trial_move(&t, s_trial_moves[i].to) == 0);
        CHECK(t.row.state == (store_trial_state)s_trial_moves[i].to);
    }
    for (size_t i = 0; i < N(s_plan_moves); i++) {
        ctl_trial t = {.row = {.id = 1}, .plan = s_plan_moves[i].from, .kill_sent = 1};
        snprintf(t.plan_reason, sizeof t.plan_reason, "why");
        CHECK(ctl_trial_plan_to(&t, s_plan_moves[i].to) == 0);
        CHECK(t.plan == (ctl_trial_plan)s_plan_moves[i].to);
        if (t.plan == PLAN_NONE) /* back to NONE forgets the plan's fields */
            CHECK(!t.kill_sent && !t.plan_reason[0]);
    }
}

/* An illegal move in a child: it aborts (assert), or, with asserts off,
   returns -1 and changes nothing (the child then exits 3). Exit 4: the
   move happened. */
static int s_illegal_in_child(store_trial_state from, store_trial_state to)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY); /* the assert's and log's lines */
        dup2(null, 2);
        ctl_trial t = {.row = {.id = 9, .state = from}};
        int rc = ctl_trial_move(&t, to);
        _exit(rc == -1 && t.row.state == from ? 3 : 4);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

TEST(an_illegal_move_by_code_is_a_programmer_error)
{
    static const move bad[] = {
        {TRIAL_COMPLETED, TRIAL_PENDING},  {TRIAL_FAILED, TRIAL_RUNNING},
        {TRIAL_PENDING, TRIAL_RUNNING},    {TRIAL_SUSPENDED, TRIAL_RUNNING},
        {TRIAL_STARTING, TRIAL_SUSPENDED},
    };
    for (size_t i = 0; i < N(bad); i++) {
        CHECK(!ctl_trial_move_legal(bad[i].from, bad[i].to));
        int st = s_illegal_in_child(bad[i].from, bad[i].to);
        int aborted = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
        int refused = WIFEXITED(st) && WEXITSTATUS(st) == 3;
        if (!aborted && !refused)
            JZT_FAIL("%s -> %s: child status %d", store_trial_state_name(bad[i].from),
                     store_trial_state_name(bad[i].to), st);
    }
}

/* ---- 3. commands asked by messages ---- */

TEST(commands_are_refused_in_states_that_do_not_allow_them)
{
    char buf[128];
    static const struct {
        store_trial_state state;
        ctl_trial_plan plan;
        ctl_trial_cmd cmd;
        int allowed;
    } cases[] = {
        {TRIAL_PENDING, PLAN_NONE, TRIAL_CMD_STOP, 1},
        {TRIAL_PENDING, PLAN_NONE, TRIAL_CMD_PAUSE, 0},
        {TRIAL_PENDING, PLAN_NONE, TRIAL_CMD_RESUME, 0},
        {TRIAL_PENDING, PLAN_NONE, TRIAL_CMD_SET, 0},
        {TRIAL_PENDING, PLAN_NONE, TRIAL_CMD_RELEASE, 0},
        {TRIAL_STARTING, PLAN_NONE, TRIAL_CMD_RELEASE, 0},
        {TRIAL_STARTING, PLAN_NONE, TRIAL_CMD_STOP, 1},
        {TRIAL_RUNNING, PLAN_NONE, TRIAL_CMD_PAUSE, 1},
        {TRIAL_RUNNING, PLAN_NONE, TRIAL_CMD_SET, 1},
        {TRIAL_RUNNING, PLAN_NONE, TRIAL_CMD_RELEASE, 1},
        {TRIAL_RUNNING, PLAN_RELEASE_CHECKPOINT, TRIAL_CMD_RELEASE, 0},
        {TRIAL_RUNNING, PLAN_STOP, TRIAL_CMD_RELEASE, 0},
        {TRIAL_RUNNING, PLAN_RESTART, TRIAL_CMD_RELEASE, 0},
        {TRIAL_PAUSED, PLAN_NONE, TRIAL_CMD_RESUME, 1},
        {TRIAL_PAUSED, PLAN_NONE, TRIAL_CMD_RELEASE, 1},
        {TRIAL_SUSPENDED, PLAN_NONE, TRIAL_CMD_RESUME, 1},
        {TRIAL_SUSPENDED, PLAN_NONE, TRIAL_CMD_STOP, 1},
        {TRIAL_SUSPENDED, PLAN_NONE, TRIAL_CMD_PAUSE, 0},
        {TRIAL_SUSPENDED, PLAN_NONE, TRIAL_CMD_SET, 0},
        {TRIAL_COMPLETED, PLAN_NONE, TRIAL_CMD_STOP, 0},
        {TRIAL_FAILED, PLAN_NONE, TRIAL_CMD_RESUME, 0},
        {TRIAL_STOPPED, PLAN_NONE, TRIAL_CMD_STOP, 0},
        {TRIAL_STOPPED, PLAN_NONE, TRIAL_CMD_SET, 0},
    };
    for (size_t i = 0; i < N(cases); i++) {
        ctl_trial t = {.row = {.id = 5, .state = cases[i].state}, .plan = cases[i].plan};
        const char *why = ctl_trial_cmd_refusal(&t, cases[i].cmd, buf, sizeof buf);
        if ((why == NULL) != cases[i].allowed)
            JZT_FAIL("case %zu (%s, plan %s, cmd %d): %s", i,
                     store_trial_state_name(cases[i].state),
                     ctl_trial_plan_name(cases[i].plan), (int)cases[i].cmd,
                     why ? why : "allowed");
        CHECK(t.row.state == cases[i].state && t.plan == cases[i].plan); /* unchanged */
    }
    ctl_trial t = {.row = {.id = 5, .state = TRIAL_COMPLETED}};
    CHECK_STR(ctl_trial_cmd_refusal(&t, TRIAL_CMD_PAUSE, buf, sizeof buf),
              "trial 5 is completed, not running");
}

/* The pure refusal function over every state, plan and command, against
   the rules written out again here, one row per state: for the commands
   stop, pause, resume, set, release, 'y' allowed, 'n' not active, 'b'
   busy; first with no plan, then with any plan. */
TEST(the_refusal_of_every_state_plan_and_command)
{
    static const struct {
        store_trial_state state;
        const char *no_plan, *a_plan;
    } rows[] = {
        {TRIAL_PENDING, "ynnnn", "ynnnn"},   {TRIAL_STARTING, "yyyyb", "yyyyb"},
        {TRIAL_RUNNING, "yyyyy", "yyyyb"},   {TRIAL_PAUSED, "yyyyy", "yyyyb"},
        {TRIAL_SUSPENDED, "ynynn", "ynynn"}, {TRIAL_COMPLETED, "nnnnn", "nnnnn"},
        {TRIAL_FAILED, "nnnnn", "nnnnn"},    {TRIAL_STOPPED, "nnnnn", "nnnnn"},
        {TRIAL_PRUNED, "nnnnn", "nnnnn"},
    };
    CHECK(N(rows) == TRIAL_STATE_COUNT);
    for (size_t r = 0; r < N(rows); r++)
        for (int p = 0; p < PLAN_COUNT; p++)
            for (int cmd = TRIAL_CMD_STOP; cmd <= TRIAL_CMD_RELEASE; cmd++) {
                char want = (p == PLAN_NONE ? rows[r].no_plan : rows[r].a_plan)[cmd];
                ctl_trial_refusal got = ctl_trial_state_refusal(
                    rows[r].state, (ctl_trial_plan)p, (ctl_trial_cmd)cmd);
                char g = got == TRIAL_REFUSE_NONE         ? 'y'
                         : got == TRIAL_REFUSE_NOT_ACTIVE ? 'n'
                         : got == TRIAL_REFUSE_BUSY       ? 'b'
                                                          : '?';
                if (g != want)
                    JZT_FAIL("%s, plan %s, command %d: got %c, want %c",
                             store_trial_state_name(rows[r].state),
                             ctl_trial_plan_name((ctl_trial_plan)p), cmd, g, want);
            }
    /* the words a person reads, for each kind of refusal */
    char buf[128];
    ctl_trial t = {.row = {.id = 7, .state = TRIAL_RUNNING}, .plan = PLAN_STOP};
    CHECK_STR(ctl_trial_cmd_refusal(&t, TRIAL_CMD_RELEASE, buf, sizeof buf),
              "the trial is starting, stopping or already releasing");
    t.row.state = TRIAL_PRUNED;
    CHECK_STR(ctl_trial_cmd_refusal(&t, TRIAL_CMD_SET, buf, sizeof buf),
              "trial 7 is pruned, not running");
    t.row.state = TRIAL_PAUSED;
    t.plan = PLAN_NONE;
    CHECK(ctl_trial_cmd_refusal(&t, TRIAL_CMD_RELEASE, buf, sizeof buf) == NULL);
}

/* ---- the id map ---- */

TEST(id_map_finds_every_id_and_nothing_else)
{
    ctl_idmap m = {0};
    CHECK(ctl_idmap_get(&m, 1) == NULL); /* empty */
    static int vals[3];
    /* ids that share low bits (multiples of 4096) and a dense run */
    for (long i = 1; i <= 20000; i++)
        ctl_idmap_put(&m, i % 2 ? i : i * 4096, &vals[i % 3]);
    CHECK(m.count == 20000);
    CHECK(m.cap >= 2 * m.count); /* at most half full */
    int wrong = 0;
    for (long i = 1; i <= 20000; i++)
        wrong += ctl_idmap_get(&m, i % 2 ? i : i * 4096) != &vals[i % 3];
    CHECK(wrong == 0);
    CHECK(ctl_idmap_get(&m, 4096 * 3) == NULL); /* odd multiple: never put */
    CHECK(ctl_idmap_get(&m, 20001) == NULL);
    CHECK(ctl_idmap_get(&m, 0) == NULL && ctl_idmap_get(&m, -5) == NULL);
    ctl_idmap_put(&m, 7, &vals[2]); /* replace: no new entry */
    CHECK(m.count == 20000 && ctl_idmap_get(&m, 7) == &vals[2]);
    ctl_idmap_put(&m, 0, &vals[0]); /* ids are > 0: ignored */
    CHECK(m.count == 20000);
    ctl_idmap_clear(&m);
    CHECK(m.count == 0 && ctl_idmap_get(&m, 7) == NULL);
}

/* ---- 4. a lifecycle on a real store ---- */

static char s_dir[64];

static ctl_t *s_ctl(void)
{
    char db[128], err[256];
    snprintf(db, sizeof db, "%s/state.db", s_dir);
    ctl_t *c = util_xcalloc(1, sizeof *c);
    c->store = store_open(db, 0, err, sizeof err);
    if (!c->store) {
        printf("store_open: %s\n", err);
        free(c);
        return NULL;
    }
    c->lost_timeout = 3600;
    snprintf(c->ckpt_root, sizeof c->ckpt_root, "%s/ckpt", s_dir);
    c->next_trial_id = store_trial_next_id(c->store);
    return c;
}

/* Submits study `name` (objective score, max; budget trials at most
   `parallel` at a time; x in [0, 1]; `trial` the trial object as JSON
   text), as the controller does for a client; the study, or NULL after
   printing why. */
static ctl_study *s_submit(ctl_t *c, const char *name, int trials, int parallel,
                           const char *trial)
{
    char text[512];
    snprintf(text, sizeof text,
             "{\"name\":\"%s\",\"objective\":{\"metric\":\"score\",\"mode\":"
             "\"max\"},\"budget\":{\"trials\":%d,\"parallel\":%d},"
             "\"space\":{\"x\":{\"type\":\"float\",\"low\":0,\"high\":1}},"
             "\"trial\":%s}",
             name, trials, parallel, trial);
    json_t *spec = json_loads(text, 0, NULL);
    ctl_study *s = NULL;
    int resumed, finished;
    const char *code = "";
    char msg[256];
    if (ctl__submit(c, spec, &s, &resumed, &finished, &code, msg, sizeof msg) != 0) {
        printf("submit %s: %s: %s\n", name, code, msg);
        s = NULL;
    }
    json_decref(spec);
    return s;
}

/* Dispatcher "d1" registered and alive with `slots` slots, heard from now
   (borrowed from c). */
static ctl_disp *s_disp_up(ctl_t *c, int slots)
{
    ctl_disp *d = ctl__disp_get(c, "d1");
    d->alive = 1;
    d->slots = slots;
    d->last_seen = util_now();
    return d;
}

/* Commits like the event loop, then counts (and drops) the queued
   messages of `type` ("" for all). */
static int s_commit(ctl_t *c, const char *type)
{
    if (c->in_txn) {
        store_commit(c->store);
        c->in_txn = 0;
    }
    int n = 0;
    for (size_t i = 0; i < c->nout; i++) {
        const char *t = json_string_value(json_object_get(c->outbox[i].msg, "type"));
        const char *kind = json_string_value(json_object_get(c->outbox[i].msg, "kind"));
        char both[64];
        snprintf(both, sizeof both, "%s/%s", t ? t : "", kind ? kind : "");
        n += !*type || (t && !strcmp(type, t)) || !strcmp(type, both);
        json_decref(c->outbox[i].msg);
    }
    c->nout = 0;
    return n;
}

/* The state text persisted for trial `id` (read back from the store). */
static const char *s_persisted(ctl_t *c, long id, int *study_stopped)
{
    static char state[16];
    store_trial row;
    if (store_trial_get(c->store, id, &row) != 1)
        return "(none)";
    snprintf(state, sizeof state, "%s", store_trial_state_name(row.state));
    if (study_stopped)
        *study_stopped = row.study_stopped;
    store_trial_fini(&row);
    return state;
}

/* 1 when s's per-state counts (kept by ctl_trial_move, read by the
   queue each iteration instead of a walk over the trials) match its
   trials. */
static int s_counts_ok(const ctl_study *s)
{
    long n[TRIAL_STATE_COUNT] = {0};
    for (size_t i = 0; i < s->ntrials; i++)
        n[s->trials[i]->row.state]++;
    long active = 0;
    for (int k = 0; k < TRIAL_STATE_COUNT; k++) {
        if (n[k] != s->by_state[k]) {
            printf("study %s: %ld trials %s, counted %ld\n", s->row.name, n[k],
                   store_trial_state_name((store_trial_state)k), s->by_state[k]);
            return 0;
        }
        active +=
            k == TRIAL_STARTING || k == TRIAL_RUNNING || k == TRIAL_PAUSED ? n[k] : 0;
    }
    return ctl__study_active(s) == active;
}

static long s_last_instr(ctl_t *c, long trial)
{
    for (size_t i = c->ninstrs; i-- > 0;)
        if (c->instrs[i].trial_id == trial)
            return c->instrs[i].id;
    return -1;
}

TEST(a_lifecycle_through_every_move_on_a_real_store)
{
    ctl_t *c = s_ctl();
    REQUIRE(c);
    ctl_study *s = s_submit(c, "states", 2, 1, "{\"command\":[\"true\"],\"retries\":1}");
    REQUIRE(s && s->row.state == STUDY_RUNNING);
    s_commit(c, "");
    CHECK(s_counts_ok(s));

    /* no dispatcher: nothing starts */
    ctl__tick(c, util_now());
    CHECK(s->ntrials == 0);
    ctl_disp *d = s_disp_up(c, 1);

    /* PENDING -> STARTING -> RUNNING */
    ctl__tick(c, util_now());
    REQUIRE(s->ntrials == 1);
    ctl_trial *t = s->trials[0];
    long id = t->row.id;
    CHECK(ctl__trial_by_id(c, id) == t);
    CHECK(t->row.state == TRIAL_STARTING && d->used == 1);
    CHECK(s_commit(c, "start") == 1);
    CHECK_STR(s_persisted(c, id, NULL), "starting");
    ctl__trial_heard(c, t);
    s_commit(c, "");
    CHECK(s_counts_ok(s));
    CHECK(t->row.state == TRIAL_RUNNING);
    CHECK_STR(s_persisted(c, id, NULL), "running");

    /* RUNNING -> PAUSED -> RUNNING, by acknowledged instructions */
    ctl__instruct(c, t, "pause", NULL, "cli", "test", NULL, 0);
    ctl__instr_done(c, s_last_instr(c, id), 1, NULL);
    s_commit(c, "");
    CHECK(s_counts_ok(s));
    CHECK(t->row.state == TRIAL_PAUSED);
    CHECK_STR(s_persisted(c, id, NULL), "paused");
    ctl__instruct(c, t, "resume", NULL, "cli", "test", NULL, 0);
    ctl__instr_done(c, s_last_instr(c, id), 1, NULL);
    s_commit(c, "");
    CHECK(s_counts_ok(s));
    CHECK(t->row.state == TRIAL_RUNNING);

    /* release: checkpoint, stop, exit -> SUSPENDED; the slot is free */
    char buf[128];
    CHECK(ctl_trial_cmd_refusal(t, TRIAL_CMD_RELEASE, buf, sizeof buf) == NULL);
    ctl__trial_release(c, t, "cli");
    CHECK(t->plan == PLAN_RELEASE_CHECKPOINT);
    CHECK(ctl_trial_cmd_refusal(t, TRIAL_CMD_RELEASE, buf, sizeof buf) != NULL);
    CHECK(s_commit(c, "instruction/checkpoint") == 0); /* it has not spoken: queued */
    ctl__trial_checkpoint(c, t, 7, "/tmp/ckpt-7");
    CHECK(t->plan == PLAN_RELEASE);
    ctl__trial_exited(c, t, "exited", 0, NULL, NULL);
    s_commit(c, "");
    CHECK(s_counts_ok(s));
    CHECK(t->row.state == TRIAL_SUSPENDED && t->plan == PLAN_NONE && d->used == 0);
    CHECK_STR(s_persisted(c, id, NULL), "suspended");
    /* a repeated exit report changes nothing */
    ctl__trial_exited(c, t, "exited", 1, NULL, NULL);
    CHECK(t->row.state == TRIAL_SUSPENDED);

    /* SUSPENDED -> PENDING (unsuspend) -> STARTING with the checkpoint */
    ctl__trial_unsuspend(c, t, "cli");
    CHECK(t->row.state == TRIAL_PENDING && t->row.attempt == 1);
    CHECK_STR(t->load_on_start, "/tmp/ckpt-7");
    ctl__tick(c, util_now());
    CHECK(t->row.state == TRIAL_STARTING && !t->load_on_start[0]);
    int loads = 0;
    for (size_t i = 0; i < c->nout; i++)
        loads += json_object_get(json_object_get(c->outbox[i].msg, "env"),
                                 "JIZHI_LOAD_CHECKPOINT") != NULL;
    CHECK(loads == 1);
    s_commit(c, "");
    CHECK(s_counts_ok(s));

    /* STARTING -> PENDING: the resume was no failure, so its first failed
       exit has its retry (retries 1); STARTING -> FAILED: the second has
       none left */
    ctl__trial_exited(c, t, "exited", 2, NULL, NULL);
    CHECK(t->row.state == TRIAL_PENDING && t->row.attempt == 2 && t->row.failures == 1);
    ctl__tick(c, util_now());
    CHECK(t->row.state == TRIAL_STARTING);
    ctl__trial_exited(c, t, "exited", 2, NULL, NULL);
    s_commit(c, "");
    CHECK(s_counts_ok(s));
    CHECK(t->row.state == TRIAL_FAILED && t->row.failures == 2);
    CHECK_STR(s_persisted(c, id, NULL), "failed");
    CHECK(ctl_trial_cmd_refusal(t, TRIAL_CMD_STOP, buf, sizeof buf) != NULL);

    /* the second trial: RUNNING -> PENDING (retry) -> ... -> STOPPED by the
       study stop, persisted as study_stopped, and PENDING again on resume */
    ctl__tick(c, util_now());
    REQUIRE(s->ntrials == 2);
    ctl_trial *u = s->trials[1];
    long uid = u->row.id;
    ctl__trial_heard(c, u);
    ctl__trial_exited(c, u, "signaled", 9, NULL, NULL);
    CHECK(u->row.state == TRIAL_PENDING && u->row.attempt == 1);
    ctl__tick(c, util_now());
    CHECK(u->row.state == TRIAL_STARTING);
    ctl__trial_heard(c, u);
    s_commit(c, "");
    CHECK(s_counts_ok(s));
    ctl__study_stop(c, s, "cli", NULL);
    CHECK(s->row.state == STUDY_STOPPED && u->plan == PLAN_STOP && u->plan_by_study);
    CHECK(s_commit(c, "") >= 0);
    ctl__trial_exited(c, u, "exited", 0, NULL, NULL);
    s_commit(c, "");
    CHECK(s_counts_ok(s));
    int by_study = 0;
    CHECK(u->row.state == TRIAL_STOPPED);
    CHECK_STR(s_persisted(c, uid, &by_study), "stopped");
    CHECK(by_study == 1);
    /* the reason text no longer decides anything */
    snprintf(u->row.reason, sizeof u->row.reason, "something else");
    ctl__study_resume(c, s, "cli");
    s_commit(c, "");
    CHECK(s_counts_ok(s));
    CHECK(s->row.state == STUDY_RUNNING);
    CHECK(u->row.state == TRIAL_PENDING && u->row.attempt == 2);
    CHECK_STR(s_persisted(c, uid, &by_study), "pending");
    CHECK(by_study == 0);

    /* PENDING -> STOPPED (stop while waiting), not by the study: a study
       stop and resume leave it stopped */
    ctl__trial_stop(c, u, "cli", "stopped by a person", 0);
    s_commit(c, "");
    CHECK(s_counts_ok(s));
    CHECK(u->row.state == TRIAL_STOPPED && !u->row.study_stopped);
    ctl__study_stop(c, s, "cli", NULL);
    ctl__study_resume(c, s, "cli");
    s_commit(c, "");
    CHECK(s_counts_ok(s));
    CHECK(u->row.state == TRIAL_STOPPED);

    /* both trials ended, budget used: FINISHED, and final */
    ctl__tick(c, util_now());
    s_commit(c, "");
    CHECK(s_counts_ok(s));
    CHECK(s->row.state == STUDY_FINISHED);
    store_study row;
    REQUIRE(store_study_get(c->store, "states", &row) == 1);
    CHECK(row.state == STUDY_FINISHED);
    store_study_fini(&row);
    /* only study extend runs it again */
    CHECK(!ctl_study_move_legal(s->row.state, STUDY_STOPPED));
    CHECK(ctl_study_move_legal(s->row.state, STUDY_RUNNING));
    ctl_destroy(&c);
}

TEST(restart_plan_and_stop_plans)
{
    ctl_t *c = s_ctl();
    REQUIRE(c);
    ctl_study *s = s_submit(c, "plans", 3, 1, "{\"command\":[\"true\"]}");
    REQUIRE(s);
    s_disp_up(c, 1);
    ctl__tick(c, util_now());
    REQUIRE(s->ntrials == 1);
    ctl_trial *t = s->trials[0];
    ctl__trial_heard(c, t);
    s_commit(c, "");

    /* RESTART: kill sent at once; the exit makes it PENDING, loading the
       checkpoint at its next start */
    ctl__trial_restart_from(c, t, "/tmp/donor", "restart");
    CHECK(t->plan == PLAN_RESTART && t->kill_sent);
    CHECK(s_commit(c, "kill") == 1);
    ctl__trial_exited(c, t, "killed", -1, NULL, NULL);
    CHECK(t->row.state == TRIAL_PENDING && t->row.attempt == 1 && t->plan == PLAN_NONE);
    CHECK_STR(t->load_on_start, "/tmp/donor");
    ctl__tick(c, util_now());
    CHECK(t->row.state == TRIAL_STARTING && !t->load_on_start[0]);
    ctl__trial_heard(c, t);
    s_commit(c, "");

    /* STOP: the instruction, a kill only after the grace period, and the
       exit ends it as stopped with the stop's reason */
    ctl__trial_stop(c, t, "cli", "enough", 0);
    CHECK(t->plan == PLAN_STOP);
    CHECK(s_commit(c, "") == 0); /* the trial has not spoken: instruction queued */
    ctl__trial_tick(c, t, util_now());
    CHECK(s_commit(c, "kill") == 0);
    ctl__trial_tick(c, t, util_now() + 11);
    CHECK(s_commit(c, "kill") == 1 && t->kill_sent);
    /* a later stop or release changes nothing */
    ctl__trial_stop(c, t, "cli", "again", 0);
    CHECK_STR(t->plan_reason, "enough");
    char buf[128];
    CHECK(ctl_trial_cmd_refusal(t, TRIAL_CMD_RELEASE, buf, sizeof buf) != NULL);
    ctl__trial_exited(c, t, "signaled", 9, NULL, NULL);
    s_commit(c, "");
    CHECK(t->row.state == TRIAL_STOPPED);
    CHECK_STR(t->row.reason, "enough");

    /* a release that a stop overtakes ends as stopped, not suspended */
    ctl__tick(c, util_now());
    REQUIRE(s->ntrials == 2);
    ctl_trial *u = s->trials[1];
    ctl__trial_heard(c, u);
    ctl__trial_release(c, u, "cli");
    ctl__trial_stop(c, u, "cli", "changed my mind", 0);
    CHECK(u->plan == PLAN_STOP);
    ctl__trial_checkpoint(c, u, 3, "/tmp/c3");
    CHECK(u->plan == PLAN_STOP);
    ctl__trial_exited(c, u, "exited", 0, NULL, NULL);
    s_commit(c, "");
    CHECK(u->row.state == TRIAL_STOPPED);

    /* a completed run stands even when a restart was planned */
    ctl__tick(c, util_now());
    REQUIRE(s->ntrials == 3);
    ctl_trial *w = s->trials[2];
    ctl__trial_heard(c, w);
    store_point p = {.step = 1, .name = "score", .value = 0.5};
    CHECK(ctl__txn(c) == 0);
    CHECK(ctl__trial_metrics(c, w, &p, 1, util_now()) == 0);
    ctl__trial_restart_from(c, w, "/tmp/donor", "restart");
    ctl__trial_exited(c, w, "exited", 0, NULL, NULL);
    s_commit(c, "");
    CHECK(w->row.state == TRIAL_COMPLETED);
    CHECK_STR(s_persisted(c, w->row.id, NULL), "completed");
    ctl_destroy(&c);
}

/* Ticks until study s's trial `i` has been started (pending before),
   and hears from it: RUNNING. */
static ctl_trial *s_run_trial(ctl_t *c, ctl_study *s, size_t i)
{
    for (int k = 0;
         k < 4 && (s->ntrials <= i || s->trials[i]->row.state == TRIAL_PENDING); k++)
        ctl__tick(c, util_now());
    if (s->ntrials <= i || s->trials[i]->row.state != TRIAL_STARTING)
        return NULL;
    ctl__trial_heard(c, s->trials[i]);
    s_commit(c, "");
    return s->trials[i];
}

/* The failures persisted for trial `id`, -1 when none. */
static long s_persisted_failures(ctl_t *c, long id)
{
    store_trial row;
    if (store_trial_get(c->store, id, &row) != 1)
        return -1;
    long n = row.failures;
    store_trial_fini(&row);
    return n;
}

/* `retries` counts the attempts that failed, not every new attempt: a
   resume after a pause --release and a study's stop and resume start the
   trial again without using a retry (review37 item 3); lost attempts get
   two more. The count is persisted with the trial. */
TEST(retries_count_failures_not_restarts)
{
    ctl_t *c = s_ctl();
    REQUIRE(c);
    s_disp_up(c, 3);

    /* released and resumed: its first failure is retried, its second ends it */
    ctl_study *s = s_submit(c, "rel", 1, 1, "{\"command\":[\"true\"],\"retries\":1}");
    REQUIRE(s);
    ctl_trial *t = s_run_trial(c, s, 0);
    REQUIRE(t);
    ctl__trial_release(c, t, "cli");
    ctl__trial_checkpoint(c, t, 5, "/tmp/ckpt-5");
    ctl__trial_exited(c, t, "exited", 0, NULL, NULL);
    CHECK(t->row.state == TRIAL_SUSPENDED);
    ctl__trial_unsuspend(c, t, "cli");
    s_commit(c, "");
    CHECK(t->row.attempt == 1 && t->row.failures == 0);
    REQUIRE(s_run_trial(c, s, 0) == t);
    ctl__trial_exited(c, t, "signaled", 9, NULL, NULL);
    s_commit(c, "");
    CHECK(t->row.state == TRIAL_PENDING && t->row.attempt == 2 && t->row.failures == 1);
    CHECK(s_persisted_failures(c, t->row.id) == 1); /* a restarted controller's too */
    REQUIRE(s_run_trial(c, s, 0) == t);
    ctl__trial_exited(c, t, "signaled", 9, NULL, NULL);
    s_commit(c, "");
    CHECK(t->row.state == TRIAL_FAILED && t->row.failures == 2);
    CHECK(s_persisted_failures(c, t->row.id) == 2);

    /* the same after its study's stop and resume */
    s = s_submit(c, "stopres", 1, 1, "{\"command\":[\"true\"],\"retries\":1}");
    REQUIRE(s);
    t = s_run_trial(c, s, 0);
    REQUIRE(t);
    ctl__study_stop(c, s, "cli", NULL);
    ctl__trial_exited(c, t, "exited", 0, NULL, NULL);
    CHECK(t->row.state == TRIAL_STOPPED);
    ctl__study_resume(c, s, "cli");
    s_commit(c, "");
    CHECK(t->row.state == TRIAL_PENDING && t->row.attempt == 1 && t->row.failures == 0);
    REQUIRE(s_run_trial(c, s, 0) == t);
    ctl__trial_exited(c, t, "timeout", -1, NULL, NULL);
    s_commit(c, "");
    CHECK(t->row.state == TRIAL_PENDING && t->row.failures == 1);
    REQUIRE(s_run_trial(c, s, 0) == t);
    ctl__trial_exited(c, t, "exited", 3, NULL, NULL);
    s_commit(c, "");
    CHECK(t->row.state == TRIAL_FAILED && t->row.failures == 2);

    /* lost: retries + 2, a release between them not counted */
    s = s_submit(c, "lost", 1, 1, "{\"command\":[\"true\"]}");
    REQUIRE(s);
    t = s_run_trial(c, s, 0);
    REQUIRE(t);
    ctl__trial_lost(c, t, "lost by its dispatcher");
    CHECK(t->row.state == TRIAL_PENDING && t->row.failures == 1);
    REQUIRE(s_run_trial(c, s, 0) == t);
    ctl__trial_release(c, t, "cli");
    ctl__trial_checkpoint(c, t, 2, "/tmp/ckpt-2");
    ctl__trial_exited(c, t, "exited", 0, NULL, NULL);
    ctl__trial_unsuspend(c, t, "cli");
    CHECK(t->row.state == TRIAL_PENDING && t->row.failures == 1);
    REQUIRE(s_run_trial(c, s, 0) == t);
    ctl__trial_exited(c, t, "lost", -1, "preempted", NULL);
    CHECK(t->row.state == TRIAL_PENDING && t->row.failures == 2);
    REQUIRE(s_run_trial(c, s, 0) == t);
    ctl__trial_lost(c, t, "lost by its dispatcher");
    s_commit(c, "");
    CHECK(t->row.state == TRIAL_FAILED && t->row.failures == 3 && t->row.attempt == 3);
    ctl_destroy(&c);
}

/* The periodic pass looks only at the trials that are due (ctl_due.h):
   each once when it becomes active, then when it would be lost if not
   heard from, and when its stop's grace ends; the lost ones are exactly
   those silent for more than --lost-timeout, at the pass after that
   (issue 43: the pass walked every trial each 50 ms). */
TEST(the_periodic_pass_looks_at_due_trials_only)
{
    ctl_t *c = s_ctl();
    REQUIRE(c);
    ctl_study *s = s_submit(c, "due", 40, 40, "{\"command\":[\"true\"]}");
    REQUIRE(s);
    s_disp_up(c, 40);
    double t0 = util_now();
    for (int k = 0; k < 40 && s->ntrials < 40; k++)
        ctl__tick(c, t0);
    REQUIRE(s->ntrials == 40);
    c->lost_timeout = 10;
    for (size_t i = 0; i < 40; i++) { /* trial i last heard at t0 + i/10 */
        ctl__trial_heard(c, s->trials[i]);
        s->trials[i]->last_heard = t0 + 0.1 * (double)i;
    }
    s_commit(c, "");
    s->due_checked = 0;
    ctl__study_tick_trials(c, s, t0 + 5); /* each once: they became active */
    CHECK(s->due_checked == 40);
    ctl__study_tick_trials(c, s, t0 + 9.5); /* none due */
    CHECK(s->due_checked == 40);
    /* 10 s after trial i was heard: trials 0..20 are due, and lost */
    ctl__study_tick_trials(c, s, t0 + 12.05);
    s_commit(c, "");
    CHECK(s->due_checked == 40 + 21);
    long lost = 0;
    for (size_t i = 0; i < 40; i++) {
        int active = ctl_trial_active(s->trials[i]);
        lost += !active;
        CHECK(active == (i > 20));
    }
    CHECK(lost == 21);
    ctl__study_tick_trials(c, s, t0 + 12.05); /* nothing more is due */
    CHECK(s->due_checked == 61);
    /* trial 30 was heard again: looked at when due, kept; 21..29 lost */
    s->trials[30]->last_heard = t0 + 20;
    ctl__study_tick_trials(c, s, t0 + 13.05);
    s_commit(c, "");
    CHECK(s->due_checked == 61 + 10);
    for (size_t i = 21; i < 40; i++)
        CHECK(ctl_trial_active(s->trials[i]) == (i >= 30));
    /* a stop: the kill once its grace is over, not before */
    ctl_trial *t = s->trials[35];
    ctl__trial_stop(c, t, "cli", "enough", 0);
    double since = t->plan_since, grace = ctl__stop_grace();
    for (size_t i = 30; i < 40; i++) /* keep the others heard */
        s->trials[i]->last_heard = since + grace;
    s_commit(c, "");
    long before = s->due_checked;
    ctl__study_tick_trials(c, s, since + grace - 0.5);
    CHECK(s_commit(c, "kill") == 0 && !t->kill_sent);
    CHECK(s->due_checked == before + 1); /* the stopped trial, once */
    ctl__study_tick_trials(c, s, since + grace + 0.5);
    CHECK(s_commit(c, "kill") == 1 && t->kill_sent);
    CHECK(s->due_checked == before + 2);
    for (size_t i = 30; i < 40; i++)
        CHECK(ctl_trial_active(s->trials[i]));
    ctl_destroy(&c);
}

/* A study `name` with one running trial (*t), heard at *t0. */
static ctl_study *s_one_running(ctl_t *c, const char *name, ctl_trial **t, double *t0)
{
    ctl_study *s = s_submit(c, name, 1, 1, "{\"command\":[\"true\"]}");
    if (!s)
        return NULL;
    s_disp_up(c, 1);
    *t0 = util_now();
    ctl__tick(c, *t0);
    if (s->ntrials != 1)
        return NULL;
    *t = s->trials[0];
    ctl__trial_heard(c, *t);
    (*t)->last_heard = *t0;
    s_commit(c, "");
    return s;
}

/* A stopped study's stop of a trial that could not be written (no
   transaction: the store is inside one already) is tried again at the
   next pass, not only when the trial would be lost. */
TEST(a_stop_without_a_transaction_is_tried_at_the_next_pass)
{
    ctl_t *c = s_ctl();
    REQUIRE(c);
    ctl_trial *t = NULL;
    double t0 = 0;
    ctl_study *s = s_one_running(c, "retry", &t, &t0);
    REQUIRE(s && t);
    s->row.state = STUDY_STOPPED;        /* left running without the stop's walk */
    REQUIRE(store_begin(c->store) == 0); /* ctl__txn fails now */
    ctl__study_tick_trials(c, s, t0 + 1);
    CHECK(t->plan == PLAN_NONE && t->due_queued &&
          t->due_at == t0 + 1 + CTL_TRIAL_TICK_S);
    store_rollback(c->store);
    ctl__study_tick_trials(c, s, t0 + 1.1);
    CHECK(t->plan == PLAN_STOP);
    s_commit(c, "");
    ctl_destroy(&c);
}

/* An ask-only study's trial, never lost, is looked at again every lost
   timeout: it stays in the due heap after its first look. */
TEST(an_ask_only_trial_stays_due)
{
    ctl_t *c = s_ctl();
    REQUIRE(c);
    ctl_trial *t = NULL;
    double t0 = 0;
    ctl_study *s = s_one_running(c, "askonly", &t, &t0);
    REQUIRE(s && t);
    s->spec->ask_only = 1; /* its trials are asked for; s_look reads the flag */
    c->lost_timeout = 10;
    ctl__study_tick_trials(c, s, t0 + 1);
    CHECK(ctl_trial_active(t));
    CHECK(t->due_queued && t->due_at == t0 + 1 + 10);
    long before = s->due_checked;
    ctl__study_tick_trials(c, s, t0 + 11.5); /* never heard again: looked at, kept */
    CHECK(s->due_checked == before + 1 && ctl_trial_active(t));
    CHECK(t->due_queued && t->due_at == t0 + 11.5 + 10);
    s_commit(c, "");
    ctl_destroy(&c);
}

/* A scheduler's stop ends a trial PRUNED (its own state, persisted as
   "pruned"), a person's stop STOPPED; the status counts the pruned one
   and its best is the best completed trial, whatever the pruned and
   stopped ones reported (spec_best_counts). */
TEST(a_scheduler_stop_prunes_and_best_counts_completed_only)
{
    ctl_t *c = s_ctl();
    REQUIRE(c);
    ctl_study *s = s_submit(c, "prune", 3, 1, "{\"command\":[\"true\"]}");
    REQUIRE(s);
    s_disp_up(c, 1);
    static const double scores[3] = {0.9, 0.5, 0.99};
    for (int k = 0; k < 3; k++) {
        ctl__tick(c, util_now());
        REQUIRE(s->ntrials == (size_t)k + 1);
        ctl_trial *t = s->trials[k];
        ctl__trial_heard(c, t);
        store_point p = {.step = 1, .name = "score", .value = scores[k]};
        CHECK(ctl__txn(c) == 0);
        CHECK(ctl__trial_metrics(c, t, &p, 1, util_now()) == 0);
        if (k == 0) { /* the scheduler stops it: pruned */
            sched_instr ins = {.trial = t->row.id};
            ins.kind = INS_STOP;
            snprintf(ins.reason, sizeof ins.reason, "asha: below the rung's cutoff");
            ctl__trial_apply_sched(c, s, s->sched, &ins, 1);
            CHECK(t->plan == PLAN_STOP && t->plan_pruned);
        } else if (k == 2) { /* a person stops it */
            ctl__trial_stop(c, t, "cli", "stopped by a person", CTL_STOP_BY_PERSON);
            CHECK(t->plan == PLAN_STOP && !t->plan_pruned);
        }
        ctl__trial_exited(c, t, "exited", 0, NULL, NULL);
        s_commit(c, "");
    }
    CHECK(s->trials[0]->row.state == TRIAL_PRUNED);
    CHECK_STR(s_persisted(c, s->trials[0]->row.id, NULL), "pruned");
    CHECK_STR(s->trials[0]->row.reason, "asha: below the rung's cutoff");
    CHECK(s->trials[1]->row.state == TRIAL_COMPLETED);
    CHECK(s->trials[2]->row.state == TRIAL_STOPPED);
    CHECK_STR(s_persisted(c, s->trials[2]->row.id, NULL), "stopped");
    CHECK(ctl_trial_ended(s->trials[0]));
    /* PRUNED is final: a study stop and resume leave it pruned */
    CHECK(!ctl_trial_move_legal(TRIAL_PRUNED, TRIAL_PENDING));
    json_t *st = ctl__study_status(c, s);
    CHECK(json_integer_value(json_object_get(st, "pruned")) == 1);
    CHECK(json_integer_value(json_object_get(st, "done")) == 3);
    json_t *best = json_object_get(st, "best");
    CHECK(json_integer_value(json_object_get(best, "trial")) == s->trials[1]->row.id);
    CHECK(json_real_value(json_object_get(best, "value")) == 0.5);
    json_decref(st);
    ctl_destroy(&c);
}

/* The result recorded for trial `trial`'s stop instruction ("" when it
   has none or it is unresolved); *applied 1 or 0 (-1: unresolved). */
static const char *s_stop_result(ctl_t *c, const ctl_study *s, long trial, int *applied)
{
    static char text[400];
    text[0] = 0;
    *applied = -1;
    json_t *ev = store_events_list(c->store, s->row.id);
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        const char *kind = json_string_value(json_object_get(e, "kind"));
        json_t *detail = json_object_get(e, "detail");
        const char *ins = json_string_value(json_object_get(detail, "kind"));
        json_t *ap = json_object_get(e, "applied"), *r = json_object_get(e, "result");
        if (json_integer_value(json_object_get(e, "trial")) != trial || !kind ||
            strcmp(kind, "instruction") || !ins || strcmp(ins, "stop") ||
            json_is_null(ap))
            continue;
        *applied = json_is_true(ap);
        snprintf(text, sizeof text, "%s",
                 json_string_value(r) ? json_string_value(r) : "");
    }
    json_decref(ev);
    return text;
}

/* A stop's result says how the trial ended: within the grace only when
   it did, by the grace's kill, lost (its dispatcher dead), told (an asked
   trial, much later). Each is carried out (applied). */
TEST(a_stops_result_says_how_the_trial_ended)
{
    ctl_t *c = s_ctl();
    REQUIRE(c);
    ctl_study *s = s_submit(c, "ends", 4, 4, "{\"command\":[\"true\"]}");
    REQUIRE(s);
    s_disp_up(c, 4);
    for (int k = 0; k < 4 && s->ntrials < 4; k++)
        ctl__tick(c, util_now());
    REQUIRE(s->ntrials == 4);
    for (size_t i = 0; i < 4; i++) {
        ctl__trial_heard(c, s->trials[i]);
        ctl__trial_stop(c, s->trials[i], "cli", "enough", CTL_STOP_BY_PERSON);
    }
    s_commit(c, "");
    double grace = ctl__stop_grace();
    char want[200];
    int applied;
    /* its own exit within the grace */
    ctl_trial *t = s->trials[0];
    ctl__trial_exited(c, t, "exited", 0, NULL, NULL);
    snprintf(want, sizeof want, "the trial ended within the %g s stop grace", grace);
    CHECK_STR(s_stop_result(c, s, t->row.id, &applied), want);
    CHECK(applied == 1);
    /* the kill at the end of the grace */
    t = s->trials[1];
    ctl__trial_tick(c, t, t->plan_since + grace + 1);
    CHECK(s_commit(c, "kill") == 1);
    ctl__trial_exited(c, t, "killed", -1, NULL, NULL);
    snprintf(want, sizeof want, "carried out by a kill at the end of the %g s stop grace",
             grace);
    CHECK_STR(s_stop_result(c, s, t->row.id, &applied), want);
    CHECK(applied == 1);
    /* lost (its dispatcher dead), after a kill that went nowhere */
    t = s->trials[2];
    ctl__trial_tick(c, t, t->plan_since + grace + 1);
    t->plan_since -= 30;
    ctl__trial_lost(c, t, "lost: no word from the trial or its dispatcher");
    CHECK(t->row.state == TRIAL_STOPPED);
    const char *r = s_stop_result(c, s, t->row.id, &applied);
    CHECK(!strncmp(r, "the trial was lost 30", 21) &&
          strstr(r, " s after the stop (its dispatcher lost it or went silent)"));
    CHECK(applied == 1);
    /* its own exit, after the grace (no kill reached it) */
    t = s->trials[3];
    t->plan_since -= grace + 5;
    ctl__trial_exited(c, t, "exited", 0, NULL, NULL);
    r = s_stop_result(c, s, t->row.id, &applied);
    CHECK(!strncmp(r, "the trial ended ", 16) && !strstr(r, "within") &&
          strstr(r, " s after the stop"));
    s_commit(c, "");

    /* an asked trial told an hour after its stop */
    double t0;
    ctl_study *a = s_one_running(c, "told", &t, &t0);
    REQUIRE(a && t);
    a->spec->ask_only = 1;
    ctl__trial_stop(c, t, "cli", "enough", CTL_STOP_BY_PERSON);
    t->plan_since -= 3600;
    ctl__trial_end(c, t, TRIAL_STOPPED, "enough");
    r = s_stop_result(c, a, t->row.id, &applied);
    CHECK(!strncmp(r, "the trial was told 3600", 23) && strstr(r, " s after the stop"));
    CHECK(applied == 1);
    s_commit(c, "");
    ctl_destroy(&c);
}

/* ---- 7. dispatchers by name ---- */

TEST(dispatchers_are_found_by_name_after_adds_and_removals)
{
    ctl_t *c = s_ctl();
    REQUIRE(c);
    enum { N = 300 };
    char name[64];
    uint64_t rng = 7;
    ctl_disp *made[N];
    for (int i = 0; i < N; i++) { /* names in no order */
        long k = (long)(util_splitmix64(&rng) % 1000000);
        snprintf(name, sizeof name, "d%ld-%d", k, i);
        made[i] = ctl__disp_get(c, name);
        made[i]->alive = 1; /* heard from now: the silence check keeps it */
        made[i]->last_seen = util_now();
        CHECK(ctl__disp_get(c, name) == made[i]); /* the same one again */
    }
    REQUIRE(c->ndisps == N);
    for (int i = 0; i < N; i++) {
        CHECK(c->disps[i] == made[i]); /* registration order kept */
        CHECK(ctl__disp_by_name(c, made[i]->name) == made[i]);
    }
    CHECK(ctl__disp_by_name(c, "nobody") == NULL);
    CHECK(ctl__disp_by_name(c, "") == NULL);
    /* forget every third (silent, no trials), by name */
    int gone = 0;
    for (int i = 0; i < N; i += 3) {
        snprintf(name, sizeof name, "%s", made[i]->name);
        made[i]->alive = 0;
        CHECK(ctl__disp_release_name(c, name) == 0);
        CHECK(ctl__disp_by_name(c, name) == NULL);
        made[i] = NULL;
        gone++;
    }
    s_commit(c, "");
    CHECK(c->ndisps == (size_t)(N - gone));
    for (int i = 0; i < N; i++)
        if (made[i])
            CHECK(ctl__disp_by_name(c, made[i]->name) == made[i]);
    /* a silent one is forgotten by the tick's check too */
    ctl_disp *d = ctl__disp_by_name(c, made[1]->name);
    REQUIRE(d);
    d->alive = 0;
    d->last_seen = util_now() - 3 * c->lost_timeout;
    snprintf(name, sizeof name, "%s", d->name);
    ctl__disp_check_silence(c, util_now());
    CHECK(ctl__disp_by_name(c, name) == NULL);
    CHECK(c->ndisps == (size_t)(N - gone - 1));
    for (int i = 2; i < N; i++)
        if (made[i])
            CHECK(ctl__disp_by_name(c, made[i]->name) == made[i]);
    ctl_destroy(&c);
}

int main(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/jz-state-XXXXXX");
    if (!mkdtemp(s_dir))
        return 1;
    log_set_level(LOGL_ERROR);
    RUN(the_tables_match_the_diagrams);
    RUN(state_names_round_trip);
    RUN(every_legal_move_applies);
    RUN(an_illegal_move_by_code_is_a_programmer_error);
    RUN(commands_are_refused_in_states_that_do_not_allow_them);
    RUN(the_refusal_of_every_state_plan_and_command);
    RUN(id_map_finds_every_id_and_nothing_else);
    RUN(a_lifecycle_through_every_move_on_a_real_store);
    RUN(restart_plan_and_stop_plans);
    RUN(retries_count_failures_not_restarts);
    RUN(the_periodic_pass_looks_at_due_trials_only);
    RUN(a_stop_without_a_transaction_is_tried_at_the_next_pass);
    RUN(an_ask_only_trial_stays_due);
    RUN(a_scheduler_stop_prunes_and_best_counts_completed_only);
    RUN(a_stops_result_says_how_the_trial_ended);
    RUN(dispatchers_are_found_by_name_after_adds_and_removals);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system(cmd) != 0)
        printf("could not remove %s\n", s_dir);
    TEST_DONE();
}
