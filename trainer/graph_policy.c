/*  graph_policy.c - --cuda-graphs and the fallback from a failed CUDA
    graph (graph_policy.h).
*/
#include "trainer/graph_policy.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* The state a flag value asks for: 0, or -1 for an unknown value. */
static int s_mode(const char *mode, trn_graphs_state *s)
{
    if (!strcmp(mode, "auto"))
        *s = TRN_GRAPHS_AUTO;
    else if (!strcmp(mode, "on"))
        *s = TRN_GRAPHS_ON;
    else if (!strcmp(mode, "off"))
        *s = TRN_GRAPHS_OFF;
    else
        return -1;
    return 0;
}

int trn_graphs_init(trn_graphs *g, const char *mode)
{
    trn_graphs_state s;
    if (s_mode(mode, &s) < 0)
        return -1;
    g->state = s;
    g->failures = 0;
    g->set = 1;
    g->asked = s;
    return 0;
}

int trn_graphs_attach(trn_graphs *g, const char *mode)
{
    trn_graphs_state s;
    if (s_mode(mode, &s) < 0)
        return -1;
    if (g->set && g->asked == s)
        return 0; /* the same flag: what happened before still holds */
    return trn_graphs_init(g, mode);
}

int trn_graphs_active(const trn_graphs *g)
{
    return g->state == TRN_GRAPHS_AUTO || g->state == TRN_GRAPHS_ON;
}

void trn_graphs_move(trn_graphs *g, trn_graphs_state to)
{
    int legal = (g->state == TRN_GRAPHS_AUTO && to == TRN_GRAPHS_FELL_BACK) ||
                (g->state == TRN_GRAPHS_ON && to == TRN_GRAPHS_FAILED);
    assert(legal);
    (void)legal;
    g->state = to;
}

int trn_graphs_fail(trn_graphs *g, const char *stage, const char *why, char *msg,
                    size_t len)
{
    g->failures++;
    msg[0] = '\0';
    switch (g->state) {
    case TRN_GRAPHS_AUTO:
        trn_graphs_move(g, TRN_GRAPHS_FELL_BACK);
        snprintf(msg, len,
                 "jizhi-train: cuda: the step cannot run as a CUDA graph (%s: %s); "
                 "--cuda-graphs auto: steps run with plain launches",
                 stage, why);
        return 0;
    case TRN_GRAPHS_ON:
        trn_graphs_move(g, TRN_GRAPHS_FAILED);
        snprintf(msg, len,
                 "jizhi-train: --cuda-graphs on: the step cannot run as a CUDA graph "
                 "(%s: %s); use --cuda-graphs auto or off",
                 stage, why);
        return -1;
    case TRN_GRAPHS_FAILED:
        return -1;
    default: /* OFF, FELL_BACK: no graphs, nothing more to say */
        return 0;
    }
}

const char *trn_graphs_state_name(trn_graphs_state s)
{
    static const char *names[] = {"off", "auto", "on", "fell-back", "failed"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}
