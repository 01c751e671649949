/*  test_trn_cuda_host.c - the host-side logic of the CUDA backends, on any
    machine (no GPU, no CUDA needed):

    - the CUDA CNN's op and parameter layout (cnn_layout.h, what
      backend_cudnn.cu builds its graph from) agrees with net.c's cnn for
      several configurations: the same parameters in the same order, with
      the same names, kinds, sizes and offsets, the same BN state layout
      (offsets and values: per BN mean 0 then variance 1 after
      trn_net_init, and distinct values read at net.c's own offset of
      each BN, so two BNs of one width swapping is caught);
      and the comparison catches a swap on either side;
    - cuDNN's version check after dlopen, its warning for an older minor
      and the file name opened (cudnn_host.h);
    - the convolution algorithm cache per (layer, batch size): a batch size
      seen before reuses its choice, the cache stays bounded and outlives
      a re-attach of the same model;
    - --cuda-graphs auto|on|off and the fallback after a failed capture
      (graph_policy.h), kept across a re-attach;
    - the CUDA CNN at bf16/fp16 (cudnn_host.h): cuDNN's data and compute
      types per precision, which params keep a half working copy, the
      device memory per batch size (checked against sizes counted by hand
      for a small model, and what each batch size allocates), the
      algorithm cache re-keyed by a change of precision, the choice of
      each direction's algorithm and math type, the BN parameter type
      cuDNN must derive, and the options it refuses (exit 2 through
      trn_config_validate: --per-layer-scale for any CUDA model);
    - the bf16 BatchNorm's CPU twin (bn_half.h) against a double
      reference.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jz_test.h"
#include "trainer/bf16.h"
#include "trainer/bn_half.h"
#include "trainer/cnn_layout.h"
#include "trainer/cudnn_host.h"
#include "trainer/devplan.h"
#include "trainer/graph_policy.h"
#include "trainer/trn.h"

/* math types per direction for cache tests that do not look at them */
static const int s_math[TRN_ALGO_KINDS] = {TRN_CUDNN_TENSOR_OP_MATH, TRN_CUDNN_FMA_MATH,
                                           TRN_CUDNN_DEFAULT_MATH};

static trn_net *s_net(const char *channels, int blocks, int h, int w, int classes,
                      const char *conv)
{
    char err[TRN_ERRLEN];
    trn_config cfg;
    trn_config_defaults(&cfg);
    snprintf(cfg.model, sizeof cfg.model, "cnn");
    snprintf(cfg.channels, sizeof cfg.channels, "%s", channels);
    snprintf(cfg.conv, sizeof cfg.conv, "%s", conv);
    cfg.blocks = blocks;
    trn_net *n = trn_net_new(&cfg, 1, h, w, classes, err);
    if (!n)
        printf("trn_net_new: %s\n", err);
    return n;
}

/* The layout's own consistency: offsets are the sizes before, each conv
   weight belongs to its op and has co*c*k*k values, each BN's two params
   have its channel count and its state follows the previous BN's. */
static void s_check_layout(const trn_cnn_layout *L)
{
    long off = 0, st = 0;
    for (int i = 0; i < L->np; i++) {
        CHECK(L->p[i].off == off);
        off += L->p[i].n;
        if (L->p[i].conv >= 0) {
            const trn_qop *o = &L->op[L->p[i].conv];
            CHECK(o->kind == TRN_Q_CONV && o->pw == i);
            CHECK(L->p[i].n == (long)o->co * o->c * o->k * o->k);
        }
    }
    CHECK(L->total == off);
    for (int i = 0; i < L->nops; i++) {
        const trn_qop *o = &L->op[i];
        if (o->kind == TRN_Q_BN) {
            CHECK(o->st == st);
            st += 2L * o->c;
            CHECK(L->p[o->pw].n == o->c && L->p[o->pb].n == o->c);
        }
        /* each op reads buffers made before it and writes the next one */
        CHECK(o->in < o->out && o->in2 < o->out && o->out == i + 1);
    }
    CHECK(L->nstate == st);
    CHECK(L->nbufs == L->nops + 1);
}

/* The BN state layout by values, not only its count: net.c's state after
   trn_net_init holds each BN's running mean (0) in [st, st + c) and its
   running variance (1) in [st + c, st + 2c) at the offsets the CUDA CNN
   reads (cnn_layout's st), and every state value belongs to exactly one
   BN. Returns 1 when so, else 0 (with what differs printed when say). */
static int s_state_values_ok(const trn_cnn_layout *L, trn_net *n, int say)
{
    trn_rng r;
    trn_rng_seed(&r, 7);
    trn_net_init(n, &r);
    const float *st = trn_net_state(n);
    long nst = trn_net_state_count(n);
    if (nst != L->nstate || nst <= 0 || !st)
        return 0;
    int *owner = calloc((size_t)nst, sizeof *owner), ok = owner != NULL;
    for (int i = 0; ok && i < L->nops; i++) {
        const trn_qop *o = &L->op[i];
        if (o->kind != TRN_Q_BN)
            continue;
        if (o->st < 0 || o->st + 2L * o->c > nst) {
            if (say)
                printf("BN op %d: state [%ld, %ld) outside %ld values\n", i, o->st,
                       o->st + 2L * o->c, nst);
            ok = 0;
            break;
        }
        for (int j = 0; j < o->c; j++) {
            if (st[o->st + j] != 0.0f || st[o->st + o->c + j] != 1.0f) {
                if (say)
                    printf("BN op %d (st %ld, c %d), channel %d: mean %g (0 expected), "
                           "variance %g (1 expected)\n",
                           i, o->st, o->c, j, st[o->st + j], st[o->st + o->c + j]);
                ok = 0;
                break;
            }
            owner[o->st + j]++;
            owner[o->st + o->c + j]++;
        }
    }
    for (long k = 0; ok && k < nst; k++)
        if (owner[k] != 1) {
            if (say)
                printf("state value %ld belongs to %d BNs\n", k, owner[k]);
            ok = 0;
        }
    free(owner);
    /* distinct values (the index) read at the layout's offsets against
       net.c's own offset for each BN (its gamma and beta's trn_param.st):
       two BNs of one width that swap their statistics are told apart */
    float *sw = trn_net_state(n);
    for (long k = 0; k < nst; k++)
        sw[k] = (float)k;
    for (int i = 0; ok && i < L->nops; i++) {
        const trn_qop *o = &L->op[i];
        if (o->kind != TRN_Q_BN)
            continue;
        const trn_param *g = trn_net_param(n, o->pw), *b = trn_net_param(n, o->pb);
        if (g->kind != TRN_PBN || b->kind != TRN_PBN || g->st != b->st ||
            g->st + 2L * o->c > nst) {
            if (say)
                printf("BN op %d: params %s/%s are not one BN of net.c's\n", i, g->name,
                       b->name);
            ok = 0;
            break;
        }
        for (int j = 0; j < 2 * o->c; j++)
            if (sw[o->st + j] != sw[g->st + j]) {
                if (say)
                    printf("BN op %d (%s): value %d at %g, net.c's is %g\n", i, g->name,
                           j, sw[o->st + j], sw[g->st + j]);
                ok = 0;
                break;
            }
    }
    return ok;
}

TEST(cuda_cnn_layout_matches_net_c)
{
    static const struct {
        const char *channels;
        int blocks, h, w, classes;
        const char *conv;
    } cases[] = {
        {"8", 0, 28, 28, 10, "gemm"},      {"16,32", 1, 28, 28, 10, "auto"},
        {"4,8,16", 2, 9, 7, 3, "gemm"},    {"5,3", 3, 12, 10, 7, "gemm"},
        {"2,4,6,8", 1, 16, 16, 2, "gemm"},
    };
    static trn_cnn_layout L;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char err[TRN_ERRLEN] = "";
        trn_net *n = s_net(cases[k].channels, cases[k].blocks, cases[k].h, cases[k].w,
                           cases[k].classes, cases[k].conv);
        REQUIRE(n);
        REQUIRE(trn_cnn_layout_build(&L, trn_net_arch(n), err) == 0);
        int at = trn_cnn_layout_compare(&L, n, err);
        if (at != -1)
            printf("case %zu (%s): %s\n", k, trn_net_arch(n), err);
        CHECK(at == -1);
        CHECK(L.np == trn_net_nparams(n));
        CHECK(L.nstate == trn_net_state_count(n));
        CHECK(L.classes == cases[k].classes);
        CHECK(L.buf[0].h == cases[k].h && L.buf[0].w == cases[k].w && L.buf[0].c == 1);
        /* the ops net.c counts (trn_cnn_ops) are the ops the CUDA CNN runs */
        int ns = trn_parse_int_list(cases[k].channels, (int[8]){0}, 8);
        CHECK(L.nops == trn_cnn_ops(ns, cases[k].blocks));
        s_check_layout(&L);
        CHECK(s_state_values_ok(&L, n, 1));
        /* the first and last parameters by name, kind and size */
        CHECK_STR(L.p[0].name, "l0.weight");
        CHECK(L.p[L.np - 1].kind == TRN_PBIAS && L.p[L.np - 1].n == cases[k].classes);
        trn_net_destroy(&n);
    }
}

TEST(layout_comparison_catches_a_change_of_order_on_either_side)
{
    static trn_cnn_layout L;
    char err[TRN_ERRLEN];
    trn_net *n = s_net("4,8", 1, 10, 10, 5, "gemm");
    REQUIRE(n);
    REQUIRE(trn_cnn_layout_build(&L, trn_net_arch(n), err) == 0);
    REQUIRE(trn_cnn_layout_compare(&L, n, err) == -1);
    /* the CUDA side swaps the first BN's gamma and beta (same size, kind) */
    trn_qparam t = L.p[1];
    L.p[1] = L.p[2];
    L.p[2] = t;
    CHECK(trn_cnn_layout_compare(&L, n, err) == 1);
    CHECK(strstr(err, "l1.gamma") && strstr(err, "l1.beta"));
    L.p[2] = L.p[1];
    L.p[1] = t;
    REQUIRE(trn_cnn_layout_compare(&L, n, err) == -1);
    /* the two convs of the first block have the same size: swapped on the
       net side (names), they are told apart */
    int a = -1, b = -1;
    for (int i = 0; i < L.np; i++)
        if (L.p[i].conv >= 0 && L.p[i].n == 4L * 4 * 9)
            a < 0 ? (a = i) : b < 0 ? (b = i) : 0;
    REQUIRE(a >= 0 && b > a);
    trn_param *pa = trn_net_param(n, a), *pb = trn_net_param(n, b);
    char keep[32];
    memcpy(keep, pa->name, sizeof keep);
    memcpy(pa->name, pb->name, sizeof keep);
    memcpy(pb->name, keep, sizeof keep);
    CHECK(trn_cnn_layout_compare(&L, n, err) == a);
    memcpy(pb->name, pa->name, sizeof keep);
    memcpy(pa->name, keep, sizeof keep);
    CHECK(trn_cnn_layout_compare(&L, n, err) == -1);
    /* a size that differs moves every later offset: caught at that param */
    L.p[0].n++;
    CHECK(trn_cnn_layout_compare(&L, n, err) == 0);
    L.p[0].n--;
    /* one parameter fewer on the CUDA side */
    L.np--;
    CHECK(trn_cnn_layout_compare(&L, n, err) == L.np);
    L.np++;
    trn_net_destroy(&n);
}

/* The BN state check is by values and offsets: it fails when the CUDA
   side reads a BN's variance where its mean is (mean and variance in the
   other order, or the offset moved by c) or its statistics at another
   BN's offset. */
TEST(bn_state_check_catches_a_moved_offset_or_order)
{
    static trn_cnn_layout L;
    char err[TRN_ERRLEN];
    trn_net *n = s_net("4,8", 1, 10, 10, 5, "gemm");
    REQUIRE(n);
    REQUIRE(trn_cnn_layout_build(&L, trn_net_arch(n), err) == 0);
    REQUIRE(s_state_values_ok(&L, n, 1));
    int bn[TRN_MAX_OPS], nbn = 0;
    for (int i = 0; i < L.nops; i++)
        if (L.op[i].kind == TRN_Q_BN)
            bn[nbn++] = i;
    REQUIRE(nbn >= 3);
    trn_qop *o = &L.op[bn[1]];
    long keep = o->st;
    CHECK(keep == 2L * L.op[bn[0]].c); /* after the stem BN's mean and variance */
    o->st = keep + o->c;               /* the variance read as the mean */
    CHECK(!s_state_values_ok(&L, n, 0));
    o->st = L.op[bn[0]].st; /* the stem BN's statistics (same width: 4) */
    REQUIRE(o->c == L.op[bn[0]].c);
    CHECK(!s_state_values_ok(&L, n, 0));
    /* the stem BN and the first block's BN (both 4 wide) swap their
       statistics: each still owns c means and c variances of its own */
    o->st = L.op[bn[0]].st;
    L.op[bn[0]].st = keep;
    CHECK(!s_state_values_ok(&L, n, 0));
    L.op[bn[0]].st = o->st;
    o->st = keep;
    REQUIRE(s_state_values_ok(&L, n, 1));
    trn_net_destroy(&n);
}

/* Several ranks (the CUDA CNN's step_dist): each op with params is one
   backward stage, the last op's first; every parameter is final after its
   op's stage, and the exchange's plan (devplan.h) launches the buckets in
   backward order, each once its params are final. */
TEST(cnn_backward_stages_feed_the_exchange_plan)
{
    static trn_cnn_layout L;
    char err[TRN_ERRLEN];
    REQUIRE(trn_cnn_layout_build(&L, "cnn:1x12x12:4,8:b1:10", err) == 0);
    int with = 0;
    for (int i = 0; i < L.nops; i++)
        with += L.op[i].pw >= 0;
    CHECK(L.nstages == with);
    /* conv-BN per stem, transition and two per block, and the head */
    CHECK(L.nstages == 2 * (1 + 1 + 2 * 2) + 1);
    int stage[TRN_MAX_OPS];
    trn_cnn_layout_param_stages(&L, stage);
    CHECK(stage[L.np - 1] == 0 && stage[L.np - 2] == 0); /* the head: first */
    CHECK(stage[0] == L.nstages - 1);                    /* the stem's conv: last */
    for (int i = 0; i + 1 < L.np; i++)
        CHECK(stage[i] >= stage[i + 1] && stage[i] - stage[i + 1] <= 1);
    for (int i = 0; i < L.nops; i++) {
        const trn_qop *o = &L.op[i];
        if (o->pw < 0)
            CHECK(o->stage == -1);
        else
            CHECK(stage[o->pw] == o->stage && (o->pb < 0 || stage[o->pb] == o->stage));
    }
    long pn[TRN_MAX_OPS];
    for (int i = 0; i < L.np; i++)
        pn[i] = L.p[i].n;
    trn_devbucket b[TRN_MAX_OPS];
    for (long thr = 0; thr <= 4096; thr += 4096) {
        int nb = trn_devplan_buckets(L.np, pn, stage, L.nstages, thr, 1, b);
        REQUIRE(nb >= 1);
        int next = L.np - 1, last = 0;
        for (int k = 0; k < nb; k++) {
            CHECK(b[k].first == next); /* backward order, each param once */
            next = b[k].last - 1;
            CHECK(b[k].launch >= last);
            last = b[k].launch;
            for (int i = b[k].last; i <= b[k].first; i++)
                CHECK(stage[i] <= b[k].launch); /* final before it goes */
            if (thr == 0)
                CHECK(b[k].launch == stage[b[k].first]);
        }
        CHECK(next == -1);
    }
}

TEST(layout_refuses_what_is_not_a_cnn)
{
    static trn_cnn_layout L;
    char err[TRN_ERRLEN];
    CHECK(trn_cnn_layout_build(&L, "mlp:784-256-10", err) == -1);
    CHECK(strstr(err, "mlp:784-256-10") != NULL);
    CHECK(trn_cnn_layout_build(&L, "cnn:1x28x28:8:b999:10", err) == -1);
    CHECK(strstr(err, "too large") != NULL);
    CHECK(trn_cnn_layout_build(&L, NULL, err) == -1);
}

TEST(cudnn_version_check_names_both_versions)
{
    char err[TRN_ERRLEN], warn[TRN_ERRLEN], buf[24];
    CHECK(trn_cudnn_major(91900) == 9);
    CHECK(trn_cudnn_major(8907) == 8);
    CHECK(trn_cudnn_major(100203) == 10);
    CHECK_STR(trn_cudnn_version_text(91900, buf, sizeof buf), "9.19.0");
    CHECK_STR(trn_cudnn_version_text(8907, buf, sizeof buf), "8.9.7");
    CHECK_STR(trn_cuda_version_text(12080, buf, sizeof buf), "12.8");
    /* same major (another minor) and the same CUDA major: accepted */
    CHECK(trn_cudnn_version_check(91900, 91900, 13000, 13000, err, warn) == 0);
    CHECK(trn_cudnn_version_check(90100, 91900, 13010, 13000, err, warn) == 0);
    CHECK(trn_cudnn_version_check(91900, 91900, 13000, 0, err, warn) ==
          0); /* rt unknown */
    /* cuDNN 8 opened where the headers were 9 */
    err[0] = '\0';
    CHECK(trn_cudnn_version_check(8907, 91900, 12020, 13000, err, warn) == -1);
    CHECK(strstr(err, "8.9.7") && strstr(err, "9.19.0"));
    err[0] = '\0';
    CHECK(trn_cudnn_version_check(100000, 91900, 13000, 13000, err, warn) == -1);
    CHECK(strstr(err, "10.0.0") && strstr(err, "9.19.0"));
    /* a cuDNN 9 built for CUDA 12 under a CUDA 13 runtime */
    err[0] = '\0';
    CHECK(trn_cudnn_version_check(91900, 91900, 12080, 13000, err, warn) == -1);
    CHECK(strstr(err, "12.8") && strstr(err, "13.0"));
}

TEST(cudnn_older_minor_than_the_headers_warns_and_runs)
{
    char err[TRN_ERRLEN], warn[TRN_ERRLEN], buf[32];
    CHECK(trn_cudnn_minor(91900) == 19 && trn_cudnn_minor(90100) == 1);
    CHECK(trn_cudnn_minor(8907) == 9 && trn_cudnn_minor(100203) == 2);
    /* 9.1.0 opened, 9.19.0 headers: accepted with one warning naming both */
    strcpy(warn, "stale");
    CHECK(trn_cudnn_version_check(90100, 91900, 13010, 13000, err, warn) == 0);
    CHECK(strstr(warn, "warning") && strstr(warn, "9.1.0") && strstr(warn, "9.19.0"));
    CHECK(strstr(warn, "9.19 or newer") != NULL);
    /* the same minor (another patch) or a newer one: nothing to say */
    CHECK(trn_cudnn_version_check(91901, 91900, 13000, 13000, err, warn) == 0);
    CHECK(warn[0] == '\0');
    strcpy(warn, "stale");
    CHECK(trn_cudnn_version_check(92000, 91900, 13000, 13000, err, warn) == 0);
    CHECK(warn[0] == '\0');
    /* cuDNN 8 numbering: 8.9 headers, 8.6 library */
    CHECK(trn_cudnn_version_check(8600, 8907, 0, 0, err, warn) == 0);
    CHECK(strstr(warn, "8.6.0") && strstr(warn, "8.9.7"));
    /* a refused version says no warning (the error is what counts) */
    strcpy(warn, "stale");
    CHECK(trn_cudnn_version_check(8907, 91900, 12020, 13000, err, warn) == -1);
    CHECK(warn[0] == '\0');
    /* the file dlopened: named after the headers' major */
    CHECK_STR(trn_cudnn_soname(91900, buf, sizeof buf), "libcudnn.so.9");
    CHECK_STR(trn_cudnn_soname(8907, buf, sizeof buf), "libcudnn.so.8");
    CHECK_STR(trn_cudnn_soname(100203, buf, sizeof buf), "libcudnn.so.10");
}

TEST(algorithm_cache_reuses_a_batch_size_seen_before)
{
    enum { LAYERS = 3 };
    trn_algo_cache c;
    REQUIRE(trn_algo_cache_init(&c, LAYERS * 8) == 0);
    /* the backend's use: at every batch-size change, each conv asks the
       cache and runs the heuristics only on a miss */
    int sizes[] = {32, 64, 32, 64, 128, 32, 128, 64};
    int queries = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int l = 0; l < LAYERS; l++) {
            const trn_algo_entry *e = trn_algo_cache_get(&c, l, sizes[s]);
            if (!e) {
                queries++;
                int algo[TRN_ALGO_KINDS] = {l, sizes[s], l + sizes[s]};
                int math[TRN_ALGO_KINDS] = {l % 4, (l + 1) % 4, sizes[s] % 4};
                trn_algo_cache_put(&c, l, sizes[s], algo, math,
                                   (size_t)sizes[s] * 1000 + l);
            } else {
                CHECK(e->algo[0] == l && e->algo[1] == sizes[s]);
                CHECK(e->math[0] == l % 4 && e->math[1] == (l + 1) % 4);
                CHECK(e->math[2] == sizes[s] % 4);
                CHECK(e->algo[2] == l + sizes[s]);
                CHECK(e->ws == (size_t)sizes[s] * 1000 + l);
            }
        }
    CHECK(queries == LAYERS * 3); /* three distinct batch sizes */
    CHECK(c.misses == LAYERS * 3 && c.hits == LAYERS * 5);
    CHECK(c.evictions == 0 && c.n == LAYERS * 3);
    trn_algo_cache_fini(&c);
}

TEST(algorithm_cache_is_bounded_and_evicts_the_least_recently_used)
{
    trn_algo_cache c;
    int a[TRN_ALGO_KINDS] = {1, 2, 3}, b[TRN_ALGO_KINDS] = {4, 5, 6};
    REQUIRE(trn_algo_cache_init(&c, 4) == 0);
    trn_algo_cache_put(&c, 0, 32, a, s_math, 10);
    trn_algo_cache_put(&c, 1, 32, a, s_math, 11);
    trn_algo_cache_put(&c, 0, 64, a, s_math, 12);
    trn_algo_cache_put(&c, 1, 64, a, s_math, 13);
    CHECK(c.n == 4);
    CHECK(trn_algo_cache_get(&c, 0, 32) != NULL); /* (1, 32) is now the oldest */
    trn_algo_cache_put(&c, 0, 128, b, s_math, 14);
    CHECK(c.n == 4 && c.evictions == 1);
    CHECK(trn_algo_cache_get(&c, 1, 32) == NULL);
    CHECK(trn_algo_cache_get(&c, 0, 32) != NULL);
    const trn_algo_entry *e = trn_algo_cache_get(&c, 0, 128);
    REQUIRE(e);
    CHECK(e->algo[0] == 4 && e->ws == 14);
    /* a put of a key present replaces it in place */
    trn_algo_cache_put(&c, 0, 128, a, s_math, 20);
    CHECK(c.n == 4 && c.evictions == 1);
    e = trn_algo_cache_get(&c, 0, 128);
    REQUIRE(e);
    CHECK(e->algo[0] == 1 && e->ws == 20);
    /* many batch sizes: never more than cap entries */
    for (int nb = 1; nb <= 100; nb++)
        trn_algo_cache_put(&c, nb % 3, nb, a, s_math, (size_t)nb);
    CHECK(c.n == 4);
    CHECK(trn_algo_cache_get(&c, 100 % 3, 100) != NULL);
    trn_algo_cache_fini(&c);
}

/* Kept across detach/attach (backend_cudnn.cu: every live `set`
   re-attaches): the same model finds its choices again, another model
   starts empty; fini frees the key. */
TEST(algorithm_cache_outlives_a_reattach_of_the_same_model)
{
    trn_algo_cache c = {0};
    int a[TRN_ALGO_KINDS] = {1, 2, 3};
    const char *m1 = "cnn:1x28x28:16,32:b1:10", *m2 = "cnn:1x28x28:8:b0:10";
    REQUIRE(trn_algo_cache_attach(&c, 16, m1) == 0);
    CHECK(c.n == 0 && c.cap == 16);
    trn_algo_cache_put(&c, 0, 256, a, s_math, 100);
    trn_algo_cache_put(&c, 0, 512, a, s_math, 200);
    /* re-attach (batch 512 now), then back to 256: both choices kept */
    REQUIRE(trn_algo_cache_attach(&c, 16, m1) == 0);
    CHECK(c.n == 2);
    const trn_algo_entry *e = trn_algo_cache_get(&c, 0, 256);
    REQUIRE(e);
    CHECK(e->ws == 100 && e->algo[2] == 3);
    CHECK(trn_algo_cache_get(&c, 0, 512) != NULL);
    CHECK(c.hits == 2 && c.misses == 0);
    /* another model (a load of another architecture): emptied, re-keyed */
    REQUIRE(trn_algo_cache_attach(&c, 16, m2) == 0);
    CHECK(c.n == 0 && c.hits == 0);
    CHECK(trn_algo_cache_get(&c, 0, 256) == NULL);
    CHECK_STR(c.model, m2);
    /* the same text at another bound: rebuilt at that bound */
    trn_algo_cache_put(&c, 0, 64, a, s_math, 1);
    REQUIRE(trn_algo_cache_attach(&c, 8, m2) == 0);
    CHECK(c.cap == 8 && c.n == 0);
    trn_algo_cache_fini(&c);
    CHECK(c.e == NULL && c.model == NULL && c.n == 0);
}

/* Kept across detach/attach (backend_cuda.cu: every live `set`, a
   precision change or a load re-attaches): a policy that fell back stays
   on plain launches and says nothing more; the same flag never returns to
   auto; another flag value starts afresh. */
TEST(graph_policy_outlives_a_reattach)
{
    trn_graphs g = {0}; /* the backend's zeroed struct before its first attach */
    char msg[512];
    REQUIRE(trn_graphs_attach(&g, "auto") == 0);
    CHECK(g.state == TRN_GRAPHS_AUTO && trn_graphs_active(&g));
    CHECK(trn_graphs_fail(&g, "cudaGraphInstantiate", "x", msg, sizeof msg) == 0);
    CHECK(msg[0] != '\0');
    REQUIRE(trn_graphs_attach(&g, "auto") == 0); /* the re-attach */
    CHECK(g.state == TRN_GRAPHS_FELL_BACK && !trn_graphs_active(&g));
    CHECK(g.failures == 1);
    CHECK(trn_graphs_fail(&g, "cudaGraphInstantiate", "x", msg, sizeof msg) == 0);
    CHECK(msg[0] == '\0'); /* not repeated */
    /* an unknown value leaves it as it is */
    CHECK(trn_graphs_attach(&g, "sometimes") == -1);
    CHECK(g.state == TRN_GRAPHS_FELL_BACK);
    /* another value: from that value */
    REQUIRE(trn_graphs_attach(&g, "on") == 0);
    CHECK(g.state == TRN_GRAPHS_ON && g.failures == 0);
    REQUIRE(trn_graphs_attach(&g, "on") == 0);
    CHECK(g.state == TRN_GRAPHS_ON);
    /* off at first attach (a zeroed struct is OFF too: set tells them apart) */
    trn_graphs h = {0};
    REQUIRE(trn_graphs_attach(&h, "off") == 0);
    CHECK(h.state == TRN_GRAPHS_OFF && h.set);
    REQUIRE(trn_graphs_attach(&h, "auto") == 0);
    CHECK(h.state == TRN_GRAPHS_AUTO);
}

TEST(graph_failure_falls_back_under_auto_and_ends_the_run_under_on)
{
    trn_graphs g;
    char msg[512];
    CHECK(trn_graphs_init(&g, "maybe") == -1);
    /* auto: a failure is said once, then plain launches */
    REQUIRE(trn_graphs_init(&g, "auto") == 0);
    CHECK(trn_graphs_active(&g));
    CHECK(trn_graphs_fail(&g, "cudaStreamEndCapture", "operation not permitted", msg,
                          sizeof msg) == 0);
    CHECK(strstr(msg, "cudaStreamEndCapture") && strstr(msg, "operation not permitted"));
    CHECK(strstr(msg, "auto") && strstr(msg, "plain launches"));
    CHECK(g.state == TRN_GRAPHS_FELL_BACK && !trn_graphs_active(&g));
    CHECK(trn_graphs_fail(&g, "cudaGraphLaunch", "x", msg, sizeof msg) == 0);
    CHECK(msg[0] == '\0'); /* once */
    CHECK_STR(trn_graphs_state_name(g.state), "fell-back");
    /* on: a failure is an error naming the reason */
    REQUIRE(trn_graphs_init(&g, "on") == 0);
    CHECK(trn_graphs_active(&g));
    CHECK(trn_graphs_fail(&g, "cudaGraphInstantiate", "invalid value", msg, sizeof msg) ==
          -1);
    CHECK(strstr(msg, "--cuda-graphs on") && strstr(msg, "cudaGraphInstantiate") &&
          strstr(msg, "invalid value"));
    CHECK(g.state == TRN_GRAPHS_FAILED && !trn_graphs_active(&g));
    /* off: never active, nothing to say */
    REQUIRE(trn_graphs_init(&g, "off") == 0);
    CHECK(!trn_graphs_active(&g));
    CHECK(trn_graphs_fail(&g, "capture", "x", msg, sizeof msg) == 0 && msg[0] == '\0');
    /* the flag: auto by default, the three values taken, others refused */
    trn_config cfg;
    char err[TRN_ERRLEN];
    trn_config_defaults(&cfg);
    CHECK_STR(cfg.cuda_graphs, "auto");
    CHECK(trn_config_set(&cfg, "cuda_graphs", "on", err) == 0);
    CHECK_STR(cfg.cuda_graphs, "on");
    CHECK(trn_config_set(&cfg, "cuda_graphs", "off", err) == 0);
    CHECK(trn_config_set(&cfg, "cuda_graphs", "auto", err) == 0);
    CHECK(trn_config_set(&cfg, "cuda_graphs", "always", err) == -1);
}

/* cuDNN's types per --precision: half activations and filters with float
   compute, tensor ops and fp32 BN parameters at bf16/fp16; fp32 as before
   (FMA math, no working copies). */
TEST(cudnn_types_per_precision)
{
    char err[TRN_ERRLEN];
    trn_cudnn_types t;
    REQUIRE(trn_cudnn_types_for(TRN_FP32, &t, err) == 0);
    CHECK(t.act == TRN_CUDNN_DATA_FLOAT && t.compute == TRN_CUDNN_DATA_FLOAT);
    CHECK(t.bn == TRN_CUDNN_DATA_FLOAT && t.tensor_ops == 0 && t.esize == 4);
    CHECK(t.lp_copy == 0 && t.own_bn == 0);
    CHECK(!trn_cudnn_param_lp(&t, TRN_PW) && !trn_cudnn_param_lp(&t, TRN_PBN));
    REQUIRE(trn_cudnn_types_for(TRN_FP16, &t, err) == 0);
    CHECK(t.own_bn == 0); /* cuDNN's BN: FLOAT parameters for HALF input */
    REQUIRE(trn_cudnn_types_for(TRN_BF16, &t, err) == 0);
    CHECK(t.own_bn == 1); /* cuDNN may derive BFLOAT16: the CNN's own BN */
    CHECK(t.act == 9 && t.act == TRN_CUDNN_DATA_BFLOAT16); /* cuDNN's numbers */
    CHECK(t.compute == 0 && t.bn == 0 && t.tensor_ops == 1 && t.esize == 2);
    CHECK(trn_cudnn_param_lp(&t, TRN_PW));
    CHECK(!trn_cudnn_param_lp(&t, TRN_PBIAS) && !trn_cudnn_param_lp(&t, TRN_PBN));
    REQUIRE(trn_cudnn_types_for(TRN_FP16, &t, err) == 0);
    CHECK(t.act == 2 && t.act == TRN_CUDNN_DATA_HALF);
    CHECK(t.compute == 0 && t.bn == 0 && t.tensor_ops == 1 && t.esize == 2);
    err[0] = '\0';
    CHECK(trn_cudnn_types_for(7, &t, err) == -1);
    CHECK(strstr(err, "precision 7") != NULL);
}

/* Device memory of cnn:1x12x12:4,8:b1:10 at batch 16, against counts made
   by hand: weights 36 (stem 1->4) + 2 x 144 (block 4->4) + 288 (transition
   4->8) + 2 x 576 (block 8->8) + 80 (head) = 1844 in conv/linear weights;
   the largest conv 576; the input 144 values an example. */
TEST(cudnn_sizes_per_precision_match_a_hand_count)
{
    static trn_cnn_layout L;
    char err[TRN_ERRLEN];
    REQUIRE(trn_cnn_layout_build(&L, "cnn:1x12x12:4,8:b1:10", err) == 0);
    long feat[TRN_MAX_OPS + 1], pn[TRN_MAX_OPS], featsum = 0, pw = 0;
    int conv[TRN_MAX_OPS], lp32[TRN_MAX_OPS], lp16[TRN_MAX_OPS];
    trn_cudnn_types t32, t16;
    REQUIRE(trn_cudnn_types_for(TRN_FP32, &t32, err) == 0);
    REQUIRE(trn_cudnn_types_for(TRN_FP16, &t16, err) == 0);
    for (int i = 0; i < L.nbufs; i++)
        featsum += feat[i] = (long)L.buf[i].c * L.buf[i].h * L.buf[i].w;
    for (int i = 0; i < L.np; i++) {
        pn[i] = L.p[i].n;
        conv[i] = L.p[i].conv >= 0;
        lp32[i] = trn_cudnn_param_lp(&t32, L.p[i].kind);
        lp16[i] = trn_cudnn_param_lp(&t16, L.p[i].kind);
        pw += lp16[i] ? pn[i] : 0;
    }
    CHECK(pw == 1844);
    CHECK(feat[0] == 144);
    trn_cudnn_sizes a, b;
    trn_cudnn_sizes_for(&t32, 16, L.nbufs, feat, L.np, pn, conv, lp32, &a);
    trn_cudnn_sizes_for(&t16, 16, L.nbufs, feat, L.np, pn, conv, lp16, &b);
    CHECK(a.act == (size_t)(2 * 16 * featsum * 4));
    CHECK(b.act * 2 == a.act); /* half the activation memory */
    CHECK(a.master == (size_t)(3 * L.total * 4) && b.master == a.master);
    CHECK(a.lp == 0 && a.gconv == 0 && a.stage == 0); /* fp32: as before */
    CHECK(b.lp == 1844 * 2);
    CHECK(b.gconv == 576 * 2);
    CHECK(b.stage == 16 * 144 * 4);
    CHECK(a.ones == 16 * 4 && b.ones == 16 * 2 && a.labels == 16 && b.labels == 16);
    trn_cudnn_sizes w; /* attach's check: the weights alone */
    trn_cudnn_sizes_for(&t16, 0, 0, NULL, L.np, pn, conv, lp16, &w);
    CHECK(w.master == b.master && w.lp == b.lp && w.act == 0 && w.stage == 0);
    CHECK(trn_cudnn_sizes_batch(&w) == w.gconv);
    CHECK(trn_cudnn_buf_bytes(&t16, 16, 144) == 16 * 144 * 2);
    /* what s_reserve allocates (and checks against the free memory) */
    CHECK(trn_cudnn_sizes_batch(&a) == (size_t)(2 * 16 * featsum * 4) + 16 * 4 + 16);
    CHECK(trn_cudnn_sizes_batch(&b) ==
          (size_t)(2 * 16 * featsum * 2) + 576 * 2 + 16 * 144 * 4 + 16 * 2 + 16);
}

/* The conv algorithms chosen at one precision are not reused at another
   (a --precision-schedule re-attaches): the key names the precision. */
TEST(algorithm_cache_is_chosen_again_at_another_precision)
{
    trn_algo_cache c = {0};
    char k1[128], k2[128];
    int a[TRN_ALGO_KINDS] = {1, 2, 3};
    const char *m = "cnn:1x28x28:16,32:b1:10";
    CHECK_STR(trn_cudnn_algo_key(m, TRN_BF16, k1, sizeof k1),
              "cnn:1x28x28:16,32:b1:10@bf16");
    trn_cudnn_algo_key(m, TRN_FP32, k2, sizeof k2);
    REQUIRE(trn_algo_cache_attach(&c, 16, k2) == 0);
    trn_algo_cache_put(&c, 0, 256, a, s_math, 100);
    REQUIRE(trn_algo_cache_attach(&c, 16, k2) == 0); /* same precision: kept */
    CHECK(trn_algo_cache_get(&c, 0, 256) != NULL);
    REQUIRE(trn_algo_cache_attach(&c, 16, k1) == 0); /* bf16: chosen again */
    CHECK(c.n == 0 && trn_algo_cache_get(&c, 0, 256) == NULL);
    trn_algo_cache_fini(&c);
}

/* What --backend cuda --model cnn cannot run with is refused before the
   run (trn_config_validate: exit 2), naming the option (and, for either
   model on CUDA, --per-layer-scale and --micro-batch); bf16 and fp16
   are accepted; other models and backends are not concerned. */
TEST(cuda_cnn_refuses_what_it_has_no_code_for)
{
    char err[TRN_ERRLEN];
    trn_config c;
    trn_config_defaults(&c);
    snprintf(c.backend, sizeof c.backend, "cuda");
    snprintf(c.model, sizeof c.model, "cnn");
    const char *precs[] = {"fp32", "bf16", "fp16"};
    for (int i = 0; i < 3; i++) { /* bf16: its own BN kernels */
        snprintf(c.precision, sizeof c.precision, "%s", precs[i]);
        CHECK(trn_cudnn_refuse(&c, err) == 0);
        CHECK(trn_config_validate(&c, err) == 0);
    }
    snprintf(c.precision_schedule, sizeof c.precision_schedule, "fp32:1,bf16:8");
    CHECK(trn_config_validate(&c, err) == 0);
    c.precision_schedule[0] = '\0';
    snprintf(c.optimizer, sizeof c.optimizer, "adamw");
    err[0] = '\0';
    CHECK(trn_config_validate(&c, err) == -1);
    CHECK(strstr(err, "--optimizer adamw") && strstr(err, "sgd and lars"));
    snprintf(c.optimizer, sizeof c.optimizer, "lars");
    CHECK(trn_config_validate(&c, err) == 0);
    snprintf(c.cuda_graphs, sizeof c.cuda_graphs, "on");
    err[0] = '\0';
    CHECK(trn_config_validate(&c, err) == -1);
    CHECK(strstr(err, "--cuda-graphs on") != NULL);
    snprintf(c.cuda_graphs, sizeof c.cuda_graphs, "off");
    CHECK(trn_config_validate(&c, err) == 0);
    c.per_layer_scale = 1; /* a device backend would ignore it: refused */
    err[0] = '\0';
    CHECK(trn_config_validate(&c, err) == -1);
    CHECK(strstr(err, "--per-layer-scale") != NULL);
    /* the MLP on CUDA ignored it too: refused for any model on CUDA, not
       on the CPU (per-layer scalers there) */
    snprintf(c.model, sizeof c.model, "mlp");
    err[0] = '\0';
    CHECK(trn_cudnn_refuse(&c, err) == -1);
    CHECK(trn_config_validate(&c, err) == -1);
    CHECK(strstr(err, "--per-layer-scale") && strstr(err, "--backend cuda"));
    snprintf(c.backend, sizeof c.backend, "cpu");
    CHECK(trn_config_validate(&c, err) == 0);
    snprintf(c.backend, sizeof c.backend, "cuda");
    snprintf(c.model, sizeof c.model, "cnn");
    c.per_layer_scale = 0;
    /* micro-batches: the CUDA steps take the batch whole (seen on cudaemu:
       the CNN ran as without the flag); refused for both models on CUDA,
       a chunk of the whole batch is no chunk */
    for (int m = 0; m < 2; m++) {
        snprintf(c.model, sizeof c.model, "%s", m ? "cnn" : "mlp");
        c.micro_batch = 32;
        err[0] = '\0';
        CHECK(trn_config_validate(&c, err) == -1);
        CHECK(strstr(err, "--micro-batch 32") && strstr(err, "--backend cuda"));
        c.micro_batch = c.batch_size;
        CHECK(trn_config_validate(&c, err) == 0);
        c.micro_batch = 32;
        snprintf(c.backend, sizeof c.backend, "cpu");
        CHECK(trn_config_validate(&c, err) == 0);
        snprintf(c.backend, sizeof c.backend, "cuda");
    }
    /* live: a micro-batch of the whole batch still means none at a larger
       batch (it is not refused as a chunk of it); a new one is refused */
    c.micro_batch = c.batch_size;
    trn_config l = c;
    CHECK(trn_config_set_live(&l, "batch_size", "256", err) == 0);
    CHECK(l.batch_size == 256 && l.micro_batch == 0);
    l = c;
    err[0] = '\0';
    CHECK(trn_config_set_live(&l, "micro_batch", "16", err) == -1);
    CHECK(strstr(err, "--micro-batch 16") && l.micro_batch == c.micro_batch);
    c.micro_batch = 0;
    /* the MLP on CUDA keeps its graphs; the CPU CNN any optimizer */
    snprintf(c.cuda_graphs, sizeof c.cuda_graphs, "on");
    snprintf(c.model, sizeof c.model, "mlp");
    CHECK(trn_cudnn_refuse(&c, err) == 0);
    snprintf(c.model, sizeof c.model, "cnn");
    snprintf(c.backend, sizeof c.backend, "cpu");
    snprintf(c.optimizer, sizeof c.optimizer, "adamw");
    CHECK(trn_cudnn_refuse(&c, err) == 0);
}

/* At attach, the type cuDNN derived for a BN's parameters: FLOAT runs,
   anything else (BFLOAT16, HALF) ends the run (exit 2) naming the
   precision, since the CUDA CNN keeps gamma, beta and statistics fp32. */
TEST(cudnn_bn_parameters_must_be_derived_as_float)
{
    char err[TRN_ERRLEN] = "";
    CHECK(trn_cudnn_bn_type_check(TRN_FP16, TRN_CUDNN_DATA_FLOAT, err) == 0);
    CHECK(trn_cudnn_bn_type_check(TRN_FP32, TRN_CUDNN_DATA_FLOAT, err) == 0);
    CHECK(trn_cudnn_bn_type_check(TRN_BF16, TRN_CUDNN_DATA_BFLOAT16, err) == -1);
    CHECK(strstr(err, "--precision bf16") && strstr(err, "type 9"));
    CHECK(trn_cudnn_bn_type_check(TRN_FP16, TRN_CUDNN_DATA_HALF, err) == -1);
    CHECK(strstr(err, "--precision fp16") && strstr(err, "not FLOAT"));
}

/* The _v7 result each direction uses: the first deterministic success that
   fits the workspace, at fp32 none on tensor cores (TF32); none at all is
   a failure naming the layer, the direction and the precision (the run
   ends, no fallback to an unchecked algorithm); the descriptor's math
   type is the result's (DEFAULT at fp32 set as FMA). */
TEST(cudnn_algorithm_choice_and_its_math_type)
{
    char err[TRN_ERRLEN];
    trn_cudnn_types t32, t16;
    REQUIRE(trn_cudnn_types_for(TRN_FP32, &t32, err) == 0);
    REQUIRE(trn_cudnn_types_for(TRN_FP16, &t16, err) == 0);
    const size_t MB = (size_t)1 << 20;
    trn_algo_perf r[] = {
        {.algo = 5, .status = 7, .determinism = 1, .math = 1, .memory = 0}, /* failed */
        {.algo = 4, .status = 0, .determinism = 0, .math = 1, .memory = 0}, /* nondet. */
        {.algo = 3, .status = 0, .determinism = 1, .math = 1, .memory = 512 * MB},
        {.algo = 2, .status = 0, .determinism = 1, .math = 2, .memory = MB}, /* TF32 */
        {.algo = 1, .status = 0, .determinism = 1, .math = 0, .memory = MB},
        {.algo = 0, .status = 0, .determinism = 1, .math = 3, .memory = 0},
    };
    CHECK(trn_cudnn_algo_pick(&t16, r, 6, 256 * MB) == 3);
    CHECK(trn_cudnn_algo_pick(&t16, r, 6, 1024 * MB) == 2);
    CHECK(trn_cudnn_algo_pick(&t32, r, 6, 1024 * MB) == 4); /* no tensor ops */
    CHECK(trn_cudnn_algo_pick(&t32, r, 4, 1024 * MB) == -1);
    CHECK(trn_cudnn_algo_pick(&t16, r, 2, 1024 * MB) == -1);
    CHECK(trn_cudnn_algo_pick(&t16, r, 0, 1024 * MB) == -1);
    CHECK(trn_cudnn_algo_math(&t32, TRN_CUDNN_DEFAULT_MATH) == TRN_CUDNN_FMA_MATH);
    CHECK(trn_cudnn_algo_math(&t32, TRN_CUDNN_FMA_MATH) == TRN_CUDNN_FMA_MATH);
    CHECK(trn_cudnn_algo_math(&t16, TRN_CUDNN_DEFAULT_MATH) == TRN_CUDNN_DEFAULT_MATH);
    CHECK(trn_cudnn_algo_math(&t16, TRN_CUDNN_TENSOR_OP_MATH) ==
          TRN_CUDNN_TENSOR_OP_MATH);
    CHECK(trn_cudnn_algo_math(&t16, 2) == 2);
    trn_cudnn_algo_none(3, 2, TRN_FP16, 256, 4, err);
    CHECK(strstr(err, "conv op 3") && strstr(err, "--precision fp16"));
    CHECK(strstr(err, "backward filter") && strstr(err, "batch 256"));
    trn_cudnn_algo_none(0, 0, TRN_FP32, 32, 0, err);
    CHECK(strstr(err, "forward") && strstr(err, "no TF32"));
    /* what cuDNN offered, one line each */
    trn_algo_perf offered[2] = {
        {.algo = 1, .status = 0, .determinism = 0, .math = 1, .memory = 4096},
        {.algo = 0, .status = 3, .determinism = 1, .math = 3}};
    char text[512] = "";
    FILE *f = fmemopen(text, sizeof text, "w");
    CHECK(f);
    if (f) {
        trn_cudnn_algo_list(f, offered, 2);
        fclose(f);
    }
    CHECK(strstr(text,
                 "  algorithm 1: status 0, not deterministic, math 1, workspace 4096 "
                 "bytes\n  algorithm 0: status 3, deterministic, math 3, workspace 0 "
                 "bytes\n"));
}

/* The bf16 BatchNorm of the CUDA CNN (bn_half.h: the math its own kernels
   run, here on the CPU twin, which deals each chunk's positions to the
   GPU's lanes and adds them in its order) against a double reference over
   the same bf16 inputs: batch mean and 1/std, the running statistics
   (momentum 0.1, unbiased variance, as net.c), y, and the backward's
   dgamma, dbeta and dx (with accumulation into a previous dx). Sizes: 3
   channels (85 lanes) over 1000 positions (chunks of 4, many lanes empty)
   and over 5 (chunks empty); 16 channels (16 lanes) over 100 000; 24 (10
   lanes: 256 is not a multiple) over 30 001; 300 (wider than a block: 1
   lane) over 2 000. Tolerances: statistics 1e-5 relative, parameter
   gradients 1e-5 of the sum of their terms' magnitudes (they cancel; float
   partial sums folded in double), y and dx within one
   bf16 ulp (2^-8 relative) plus 1e-6 absolute. And with every x and dy
   1: each position counted once, exactly (mean 1, dbeta = S). */
static void s_bnh_case(int C, long S)
{
    long n = S * C;
    uint16_t *x = malloc(n * 2), *y = malloc(n * 2), *dy = malloc(n * 2),
             *dx = malloc(n * 2);
    double *yr = malloc(n * sizeof(double)), *dxr = malloc(n * sizeof(double));
    float *f = malloc(9 * C * sizeof(float));
    REQUIRE(x && y && dy && dx && yr && dxr && f);
    float *g = f, *b = f + C, *rm = f + 2 * C, *rv = f + 3 * C, *rm0 = f + 4 * C,
          *rv0 = f + 5 * C, *mean = f + 6 * C, *inv = f + 7 * C, *dg = f + 8 * C;
    float *db = malloc(C * sizeof(float));
    REQUIRE(db);
    for (long i = 0; i < n; i++) { /* per channel another offset and spread */
        int j = (int)(i % C);
        x[i] = trn_f2bf((float)(j % 3 - 1) * 3.0f + (float)(j % 3 + 1) * sinf(0.37f * i));
        dy[i] = trn_f2bf(0.01f * cosf(0.11f * i + j));
        dx[i] = trn_f2bf(0.5f); /* accumulated into */
    }
    for (int j = 0; j < C; j++) {
        g[j] = 1.5f - 0.25f * (j % 7), b[j] = 0.1f * (j % 5) - 0.2f;
        rm[j] = rm0[j] = 0.2f * (j % 3), rv[j] = rv0[j] = 0.5f + (j % 4);
    }
    trn_bnh_fwd_train(x, y, C, S, g, b, rm, rv, 0.1f, 1e-5f, mean, inv);
    trn_bnh_bwd(x, dy, dx, 1, C, S, g, mean, inv, dg, db);
    for (int j = 0; j < C; j++) {
        double mu = 0, sq = 0, sdy = 0, sdyx = 0, ady = 0, adyx = 0; /* a: of |terms| */
        for (long p = 0; p < S; p++)
            mu += trn_bf2f(x[p * C + j]);
        mu /= S;
        for (long p = 0; p < S; p++) {
            double d = trn_bf2f(x[p * C + j]) - mu;
            sq += d * d;
        }
        double is = 1.0 / sqrt(sq / S + 1e-5);
        for (long p = 0; p < S; p++) {
            double xh = (trn_bf2f(x[p * C + j]) - mu) * is, d = trn_bf2f(dy[p * C + j]);
            yr[p * C + j] = g[j] * xh + b[j];
            sdy += d, sdyx += d * xh, ady += fabs(d), adyx += fabs(d * xh);
        }
        for (long p = 0; p < S; p++) {
            double xh = (trn_bf2f(x[p * C + j]) - mu) * is, d = trn_bf2f(dy[p * C + j]);
            dxr[p * C + j] = 0.5 + g[j] * is / S * (S * d - sdy - xh * sdyx);
        }
        CHECK_NEAR(mean[j], mu, 1e-5 * (fabs(mu) + 1));
        CHECK_NEAR(inv[j], is, 1e-5 * is);
        CHECK_NEAR(rm[j], 0.9 * rm0[j] + 0.1 * mu, 1e-5 * (fabs(mu) + 1));
        double uv = sq / S * S / (S - 1);
        CHECK_NEAR(rv[j], 0.9 * rv0[j] + 0.1 * uv, 1e-5 * (uv + 1));
        CHECK_NEAR(db[j], sdy, 1e-5 * (ady + 1e-3));
        CHECK_NEAR(dg[j], sdyx, 1e-5 * (adyx + 1e-3));
    }
    int bad_y = 0, bad_dx = 0;
    for (long i = 0; i < n; i++) {
        if (fabs(trn_bf2f(y[i]) - yr[i]) > fabs(yr[i]) / 256 + 1e-6)
            bad_y++;
        if (fabs(trn_bf2f(dx[i]) - dxr[i]) > fabs(dxr[i]) / 256 + 1e-6)
            bad_dx++;
    }
    CHECK(bad_y == 0);
    CHECK(bad_dx == 0);
    for (long i = 0; i < n; i++) /* every position once: sums of ones are exact */
        x[i] = dy[i] = trn_f2bf(1.0f);
    trn_bnh_fwd_train(x, y, C, S, g, b, rm, rv, 0.1f, 1e-5f, mean, inv);
    trn_bnh_bwd(x, dy, NULL, 0, C, S, g, mean, inv, dg, db);
    int miscount = 0;
    for (int j = 0; j < C; j++)
        miscount += mean[j] != 1.0f || db[j] != (float)S;
    CHECK(miscount == 0);
    free(x), free(y), free(dy), free(dx), free(yr), free(dxr), free(f), free(db);
}

TEST(bf16_batchnorm_twin_matches_a_double_reference)
{
    const struct {
        int c;
        long s;
    } cases[] = {{3, 1000}, {3, 5}, {16, 100000}, {24, 30001}, {300, 2000}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        s_bnh_case(cases[k].c, cases[k].s);
}

int main(void)
{
    RUN(cuda_cnn_layout_matches_net_c);
    RUN(layout_comparison_catches_a_change_of_order_on_either_side);
    RUN(bn_state_check_catches_a_moved_offset_or_order);
    RUN(cnn_backward_stages_feed_the_exchange_plan);
    RUN(layout_refuses_what_is_not_a_cnn);
    RUN(cudnn_version_check_names_both_versions);
    RUN(cudnn_older_minor_than_the_headers_warns_and_runs);
    RUN(algorithm_cache_reuses_a_batch_size_seen_before);
    RUN(algorithm_cache_is_bounded_and_evicts_the_least_recently_used);
    RUN(algorithm_cache_outlives_a_reattach_of_the_same_model);
    RUN(graph_policy_outlives_a_reattach);
    RUN(graph_failure_falls_back_under_auto_and_ends_the_run_under_on);
    RUN(cudnn_types_per_precision);
    RUN(cudnn_sizes_per_precision_match_a_hand_count);
    RUN(algorithm_cache_is_chosen_again_at_another_precision);
    RUN(cuda_cnn_refuses_what_it_has_no_code_for);
    RUN(cudnn_bn_parameters_must_be_derived_as_float);
    RUN(cudnn_algorithm_choice_and_its_math_type);
    RUN(bf16_batchnorm_twin_matches_a_double_reference);
    TEST_DONE();
}
