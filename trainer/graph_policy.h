/*  graph_policy.h - whether the CUDA backend replays its steady-state step
    as a CUDA graph (--cuda-graphs auto|on|off), and what a failed capture,
    instantiation or launch does: host code without CUDA, so every
    machine's unit tests check it (tests/test_trn_cuda_host.c);
    backend_cuda.cu asks it before each capture and tells it each failure.

    States and their one transition function (trn_graphs_move):
      OFF        --cuda-graphs off: plain launches only
      AUTO       --cuda-graphs auto: graphs while they work
      ON         --cuda-graphs on: graphs, a failure is an error
      FELL_BACK  AUTO after a failure: plain launches, said once on stderr
      FAILED     ON after a failure: the run ends with exit status 2
    Moves: AUTO -> FELL_BACK, ON -> FAILED; every other move is refused
    (assert). A value struct on caller storage; the CUDA backend keeps it
    across detach/attach (trn_graphs_attach) for the backend's life.
*/
#ifndef TRN_GRAPH_POLICY_H
#define TRN_GRAPH_POLICY_H

#include <stddef.h>

typedef enum {
    TRN_GRAPHS_OFF = 0,
    TRN_GRAPHS_AUTO,
    TRN_GRAPHS_ON,
    TRN_GRAPHS_FELL_BACK,
    TRN_GRAPHS_FAILED
} trn_graphs_state;

typedef struct {
    trn_graphs_state state;
    int failures;           /* failures told (the first one moves the state) */
    int set;                /* 1 once initialised (a zeroed struct: not yet) */
    trn_graphs_state asked; /* the flag's value it was initialised from */
} trn_graphs;

/* The state for the flag's value ("auto", "on", "off"). Returns 0, or -1
   for any other text (g untouched). */
int trn_graphs_init(trn_graphs *g, const char *mode);

/* At each attach of the backend: the policy kept across detach/attach. A
   g never initialised (zeroed) or initialised from another value than
   mode starts from mode (trn_graphs_init); the same value again keeps
   the state, so a policy that fell back stays on plain launches (no new
   capture, its line not repeated) after a re-attach (a live `set`, a
   precision change, a load). Returns 0, or -1 for an unknown value (g
   untouched). */
int trn_graphs_attach(trn_graphs *g, const char *mode);

/* 1 when steps should be captured and replayed as graphs. */
int trn_graphs_active(const trn_graphs *g);

/* The one transition function: moves g to `to`; asserts the move is
   legal (see the header comment). */
void trn_graphs_move(trn_graphs *g, trn_graphs_state to);

/* A capture, instantiation or launch failed: `stage` names the call that
   failed ("cudaStreamEndCapture"), `why` the CUDA error text. Writes the
   one line to print into msg (empty when nothing is to be said: graphs
   were already off), and returns 0 when the run goes on with plain
   launches (auto) or -1 when it must end with exit status 2 (on). */
int trn_graphs_fail(trn_graphs *g, const char *stage, const char *why, char *msg,
                    size_t len);

/* "off", "auto", "on", "fell-back", "failed". */
const char *trn_graphs_state_name(trn_graphs_state s);

#endif
