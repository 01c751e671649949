/*  cuda_mlp_graph.cuh - the CUDA MLP backend's steady-state step as a CUDA
    graph (--cuda-graphs auto|on|off): capture per batch size, replay, and
    the fallback to plain launches when a capture, instantiation or launch
    fails (the decision: graph_policy.h, host code tested on every
    machine). A section of backend_cuda.cu (included by it alone, after
    s_cuda, s_graphs_drop and s_enqueue_dev), split out to keep that file
    under 1000 lines. NEVER RUN ON A GPU in its fallback paths: written and
    compiled on a machine without one. */
#ifndef JZ_TRN_CUDA_MLP_GRAPH_CUH
#define JZ_TRN_CUDA_MLP_GRAPH_CUH

/* A graph could not be made or launched: stage names the call, why its
   error. The stream is synchronized first, then the error state is read
   twice (cudaGetLastError): the first
   read clears an error the runtime refused this call with; one still set
   at the second is sticky (an earlier kernel broke the context, graphs
   or not), and ends the run with exit status 1 naming that CUDA error,
   not blamed on graphs. Otherwise the policy (graph_policy.h) decides:
   --cuda-graphs auto says so once and goes on with plain launches,
   --cuda-graphs on ends the run with exit status 2 naming the reason. */
static void s_graph_failed(s_cuda *c, const char *stage, const char *why)
{
    char msg[TRN_ERRLEN + 128];
    /* the stream's earlier work finished first (never capturing here: every
       caller has ended or never begun the capture), so that an asynchronous
       fault of an earlier kernel is set before the reads below and named as
       what it is, not blamed on graphs */
    (void)cudaStreamSynchronize(c->stream);
    cudaGetLastError(); /* clears a non-sticky error */
    cudaError_t sticky = cudaGetLastError();
    if (sticky != cudaSuccess) {
        fprintf(stderr,
                "jizhi-train: CUDA error %s: %s (a sticky error from an earlier "
                "operation, seen at %s)\n",
                cudaGetErrorName(sticky), cudaGetErrorString(sticky), stage);
        exit(1);
    }
    int rc = trn_graphs_fail(&c->graphs, stage, why, msg, sizeof msg);
    if (msg[0])
        fprintf(stderr, "%s\n", msg);
    if (rc < 0)
        exit(2);
    s_graphs_drop(c);
}

/* Captures the one-rank device-data step of batch size nb. Returns the
   instantiated graph, or NULL after s_graph_failed: every failing call
   inside the capture is noted (cuda_check.cuh) instead of exiting, and
   the capture is always ended. */
template <typename T> static cudaGraphExec_t s_graph_capture(s_cuda *c, int nb)
{
    cudaStream_t st = c->stream;
    cudaError_t e = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        s_graph_failed(c, "cudaStreamBeginCapture", cudaGetErrorString(e));
        return NULL;
    }
    trn_capture_state *cap = trn__capture();
    cap->on = 1, cap->failed = 0;
    s_enqueue_dev<T>(c, nb);
    cap->on = 0;
    cudaGraph_t graph = NULL;
    e = cudaStreamEndCapture(st, &graph); /* ends it even when invalidated */
    if (cap->failed || e != cudaSuccess) {
        if (graph)
            cudaGraphDestroy(graph);
        s_graph_failed(c, cap->failed ? "capture" : "cudaStreamEndCapture",
                       cap->failed ? cap->what : cudaGetErrorString(e));
        return NULL;
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        s_graph_failed(c, "cudaGraphInstantiate", cudaGetErrorString(e));
        return NULL;
    }
    return exec;
}

/* The step of batch size nb as a CUDA graph: 1 when launched (captured
   now if needed), 0 when this step must run eagerly: the first step at a
   batch size warms up (cuBLAS's first calls), and a capture, instantiation
   or launch that fails ends graphs for the attach (s_graph_failed). */
template <typename T> static int s_graph_launch(s_cuda *c, int nb)
{
    s_graph *g = NULL, *lru = &c->graph[0];
    for (int i = 0; i < NGRAPH; i++) {
        if (c->graph[i].nb == nb)
            g = &c->graph[i];
        if (c->graph[i].used < lru->used)
            lru = &c->graph[i];
    }
    if (!g) {
        if (c->warm_nb != nb)
            return 0;
        cudaGraphExec_t exec = s_graph_capture<T>(c, nb);
        if (!exec)
            return 0;
        g = lru;
        if (g->nb)
            cudaGraphExecDestroy(g->exec);
        g->nb = nb;
        g->exec = exec;
        if (!c->quiet)
            fprintf(stderr,
                    "jizhi-train: cuda: step captured as a CUDA graph (batch %d)\n", nb);
    }
    g->used = ++c->nsteps;
    cudaError_t e = cudaGraphLaunch(g->exec, c->stream);
    if (e != cudaSuccess) {
        s_graph_failed(c, "cudaGraphLaunch", cudaGetErrorString(e));
        return 0;
    }
    return 1;
}

#endif
