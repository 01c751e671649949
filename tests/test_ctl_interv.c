/*  test_ctl_interv.c - the state machines of a guarded change and a live
    fork (controller/ctl_interv.h), and the divergence guard's loss-jump
    test they share with the guard monitor (schedulers/sched.h).

    1. The transition tables against the diagrams of ctl_interv.h, written
       out a second time: every pair of states is checked. (The states'
       names are the store's: tests/test_store.c.) ctl__iv_move refuses
       an illegal move and changes nothing; a legal move the store fails
       to save leaves the state as it was.
    2. sched_jump_judge against values worked out by hand: the average
       (EMA, weight 0.2) of healthy values, no judgement before the
       warmup, a jump above 3× the average, NaN and inf.
*/
#include "jz_test.h"

#include "common/util.h"
#include "controller/ctl_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct {
    int from, to;
} move;

static const move s_guard_moves[] = {
    {GUARD_CHECKPOINT, GUARD_APPLY}, {GUARD_CHECKPOINT, GUARD_REFUSED},
    {GUARD_APPLY, GUARD_WATCH},      {GUARD_APPLY, GUARD_REFUSED},
    {GUARD_WATCH, GUARD_KEPT},       {GUARD_WATCH, GUARD_REVERT},
    {GUARD_WATCH, GUARD_ENDED},      {GUARD_REVERT, GUARD_REVERTED},
    {GUARD_REVERT, GUARD_FAILED},
};

static const move s_fork_moves[] = {
    {FORK_CHECKPOINT, FORK_RUNNING},
    {FORK_CHECKPOINT, FORK_REFUSED},
    {FORK_RUNNING, FORK_DECIDED},
};

static int s_listed(const move *m, size_t n, int from, int to)
{
    for (size_t i = 0; i < n; i++)
        if (m[i].from == from && m[i].to == to)
            return 1;
    return 0;
}

TEST(the_tables_match_the_diagrams)
{
    for (int a = 0; a < GUARD_COUNT; a++)
        for (int b = 0; b < GUARD_COUNT; b++)
            CHECK(ctl_guard_move_legal(a, b) ==
                  s_listed(s_guard_moves, sizeof s_guard_moves / sizeof *s_guard_moves, a,
                           b));
    for (int a = 0; a < FORK_COUNT; a++)
        for (int b = 0; b < FORK_COUNT; b++)
            CHECK(
                ctl_fork_move_legal(a, b) ==
                s_listed(s_fork_moves, sizeof s_fork_moves / sizeof *s_fork_moves, a, b));
}

/* ctl__iv_move, the one transition of both machines, refuses a move its
   kind's table does not list before it touches anything (no controller
   needed on that path): a guard's legal pair is not a fork's. */
TEST(illegal_moves_change_nothing)
{
    ctl_iv iv = {.kind = IV_FORK, .state = FORK_DECIDED};
    CHECK(ctl__iv_move(NULL, &iv, FORK_RUNNING) == -1 && iv.state == FORK_DECIDED);
    iv = (ctl_iv){.kind = IV_FORK, .state = FORK_CHECKPOINT};
    CHECK(ctl__iv_move(NULL, &iv, FORK_DECIDED) == -1 && iv.state == FORK_CHECKPOINT);
    /* GUARD_CHECKPOINT -> GUARD_APPLY is 0 -> 1, as FORK_CHECKPOINT ->
       FORK_RUNNING; GUARD_WATCH -> GUARD_REVERT (2 -> 3) is no fork move */
    iv = (ctl_iv){.kind = IV_FORK, .state = 2};
    CHECK(ctl__iv_move(NULL, &iv, 3) == -1 && iv.state == 2);
    iv = (ctl_iv){.kind = IV_GUARD, .state = GUARD_KEPT};
    CHECK(ctl__iv_move(NULL, &iv, GUARD_REVERT) == -1 && iv.state == GUARD_KEPT);
}

/* A legal move whose save fails (no row with that id: the UPDATE changes
   nothing) keeps the old state in memory, as the store does. */
TEST(a_failed_save_changes_nothing)
{
    char dir[] = "/tmp/jz-iv-XXXXXX", db[64], err[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(db, sizeof db, "%s/iv.db", dir);
    ctl_t *c = util_xcalloc(1, sizeof *c);
    c->store = store_open(db, 0, err, sizeof err);
    CHECK(c->store != NULL);
    if (c->store) {
        ctl_iv iv = {.id = 4242, .kind = IV_FORK, .state = FORK_CHECKPOINT};
        CHECK(ctl__iv_move(c, &iv, FORK_RUNNING) == -1);
        CHECK(iv.state == FORK_CHECKPOINT);
        iv = (ctl_iv){.id = 4242, .kind = IV_GUARD, .state = GUARD_WATCH};
        CHECK(ctl__iv_move(c, &iv, GUARD_KEPT) == -1);
        CHECK(iv.state == GUARD_WATCH);
        if (c->in_txn)
            store_rollback(c->store);
        store_close(&c->store);
    }
    free(c);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("could not remove %s\n", dir);
}

TEST(the_jump_test_by_hand)
{
    sched_jump_test test = {3.0, 0.2, 3};
    double ema = NAN;
    long n = 0;
    char what[256];
    /* 1, 1, 1: the average 1; a 5 before the warmup would join it */
    CHECK(sched_jump_judge(&test, "train_loss", 1, 1.0, &ema, &n, what, sizeof what) ==
          0);
    CHECK(sched_jump_judge(&test, "train_loss", 2, 1.0, &ema, &n, what, sizeof what) ==
          0);
    CHECK(n == 2 && ema == 1.0);
    CHECK(sched_jump_judge(&test, "train_loss", 3, 2.0, &ema, &n, what, sizeof what) ==
          0);
    CHECK_NEAR(ema, 1.2, 1e-12); /* 1 + 0.2 (2 - 1) */
    CHECK(n == 3);
    /* 3.5 <= 3 × 1.2: healthy; average 1.2 + 0.2 (3.5 - 1.2) = 1.66 */
    CHECK(sched_jump_judge(&test, "train_loss", 4, 3.5, &ema, &n, what, sizeof what) ==
          0);
    CHECK_NEAR(ema, 1.66, 1e-12);
    /* 5 > 3 × 1.66 = 4.98: a jump, the average unchanged */
    CHECK(sched_jump_judge(&test, "train_loss", 5, 5.0, &ema, &n, what, sizeof what) ==
          1);
    CHECK_NEAR(ema, 1.66, 1e-12);
    CHECK(n == 4);
    CHECK(strstr(what, "train_loss 5 at step 5 > 3") != NULL);
    CHECK(sched_jump_judge(&test, "val_loss", 6, NAN, &ema, &n, what, sizeof what) == 1);
    CHECK_STR(what, "val_loss is nan at step 6");
    CHECK(sched_jump_judge(&test, "x", 7, INFINITY, &ema, &n, what, sizeof what) == 1);
    CHECK_STR(what, "x is inf at step 7");
    CHECK(n == 4);
}

int main(void)
{
    RUN(the_tables_match_the_diagrams);
    RUN(illegal_moves_change_nothing);
    RUN(a_failed_save_changes_nothing);
    RUN(the_jump_test_by_hand);
    TEST_DONE();
}
