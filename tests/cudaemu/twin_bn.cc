/*  twin_bn.cc - the CUDA CNN's own bf16 BatchNorm kernels
    (trainer/cuda_bn_kernels.cuh) against their CPU twin (trainer/bn_half.c)
    on cudaemu, bit for bit: the twin adds in the order the kernels do (the
    chunks, the lanes, the positions of a lane), and the emulation compiles
    without contracting multiply-adds (-ffp-contract=off), so every output
    must have the same bits. On a GPU nvcc contracts some of them; there the
    twin is checked against a double reference instead (test_trn_cuda_host.c).

    usage: cudaemu-twin-bn. Prints one line per case; exit 0 when every
    output matches, 1 with the first differing value otherwise. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "trainer/bn_half.h"
}
#include "trainer/cuda_bn_kernels.cuh"

typedef __nv_bfloat16 bf16;

static uint32_t s_rng = 12345;
static float s_uniform(void) /* in [-1, 1) */
{
    s_rng = s_rng * 1664525u + 1013904223u;
    return (float)(s_rng >> 8) / (float)(1u << 23) - 1.0f;
}

static uint16_t s_bf(float v) /* truncated: any bf16 value will do */
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return (uint16_t)(u >> 16);
}

static void *s_dev(const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess) {
        fprintf(stderr, "twin_bn: cudaMalloc of %zu bytes failed\n", bytes);
        exit(1);
    }
    if (h)
        cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    return d;
}

static void s_host(void *h, const void *d, size_t bytes)
{
    cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost);
}

/* 0 when n values of `size` bytes have the same bits */
static int s_same(const char *what, int c, long s, const void *gpu, const void *cpu,
                  long n, size_t size)
{
    for (long i = 0; i < n; i++)
        if (memcmp((const char *)gpu + i * size, (const char *)cpu + i * size, size)) {
            float g = 0, h = 0;
            if (size == 4) {
                memcpy(&g, (const char *)gpu + i * size, 4);
                memcpy(&h, (const char *)cpu + i * size, 4);
            } else {
                uint32_t a = (uint32_t)((const uint16_t *)gpu)[i] << 16,
                         b = (uint32_t)((const uint16_t *)cpu)[i] << 16;
                memcpy(&g, &a, 4);
                memcpy(&h, &b, 4);
            }
            printf("c=%d s=%ld: %s[%ld] differs: kernels %.9g, twin %.9g\n", c, s, what,
                   i, (double)g, (double)h);
            return 1;
        }
    return 0;
}

/* One BN of c channels over s positions, forward then backward (dx added
   to); 0 when the kernels and the twin agree bit for bit. */
static int s_case(int c, long s)
{
    long n = s * c;
    size_t hb = (size_t)n * sizeof(uint16_t), fb = (size_t)c * sizeof(float);
    uint16_t *x = (uint16_t *)malloc(hb), *dy = (uint16_t *)malloc(hb),
             *dx0 = (uint16_t *)malloc(hb), *y_c = (uint16_t *)malloc(hb),
             *dx_c = (uint16_t *)malloc(hb), *y_g = (uint16_t *)malloc(hb),
             *dx_g = (uint16_t *)malloc(hb);
    float *f = (float *)calloc(16 * (size_t)c, sizeof(float));
    if (!x || !dy || !dx0 || !y_c || !dx_c || !y_g || !dx_g || !f) {
        fprintf(stderr, "twin_bn: out of memory\n");
        exit(1);
    }
    float *g = f, *b = f + c, *rm_c = f + 2 * c, *rv_c = f + 3 * c, *mean_c = f + 4 * c,
          *inv_c = f + 5 * c, *dg_c = f + 6 * c, *db_c = f + 7 * c, *rm_g = f + 8 * c,
          *rv_g = f + 9 * c, *mean_g = f + 10 * c, *inv_g = f + 11 * c,
          *dg_g = f + 12 * c, *db_g = f + 13 * c;
    for (long i = 0; i < n; i++) {
        /* an offset per channel, so that the mean matters */
        x[i] = s_bf(2.0f * s_uniform() + 0.5f * (float)(i % c));
        dy[i] = s_bf(s_uniform());
        dx0[i] = s_bf(0.25f * s_uniform());
    }
    for (int j = 0; j < c; j++) {
        g[j] = 1.0f + 0.5f * s_uniform();
        b[j] = 0.5f * s_uniform();
        rm_c[j] = rm_g[j] = 0.1f * s_uniform();
        rv_c[j] = rv_g[j] = 1.0f + 0.1f * s_uniform();
    }
    /* the twin */
    memcpy(dx_c, dx0, hb);
    trn_bnh_fwd_train(x, y_c, c, s, g, b, rm_c, rv_c, 0.1f, 1e-5f, mean_c, inv_c);
    trn_bnh_bwd(x, dy, dx_c, 1, c, s, g, mean_c, inv_c, dg_c, db_c);
    /* the kernels, as backend_cudnn.cu calls them */
    bf16 *d_x = (bf16 *)s_dev(x, hb), *d_dy = (bf16 *)s_dev(dy, hb),
         *d_dx = (bf16 *)s_dev(dx0, hb), *d_y = (bf16 *)s_dev(NULL, hb);
    float *d_g = (float *)s_dev(g, fb), *d_b = (float *)s_dev(b, fb),
          *d_rm = (float *)s_dev(rm_g, fb), *d_rv = (float *)s_dev(rv_g, fb),
          *d_mean = (float *)s_dev(NULL, fb), *d_inv = (float *)s_dev(NULL, fb),
          *d_dg = (float *)s_dev(NULL, fb), *d_db = (float *)s_dev(NULL, fb),
          *d_part = (float *)s_dev(NULL, 2 * (size_t)c * TRN_BNH_CHUNKS * sizeof(float));
    cudaStream_t st;
    cudaStreamCreate(&st);
    s_bnh_forward<bf16>(st, d_x, d_y, c, s, d_g, d_b, d_rm, d_rv, d_mean, d_inv, d_part);
    s_bnh_backward<bf16>(st, d_x, d_dy, d_dx, 1, c, s, d_g, d_mean, d_inv, d_dg, d_db,
                         d_part);
    if (cudaStreamSynchronize(st) != cudaSuccess) {
        fprintf(stderr, "twin_bn: the kernels failed\n");
        exit(1);
    }
    s_host(y_g, d_y, hb);
    s_host(dx_g, d_dx, hb);
    s_host(mean_g, d_mean, fb);
    s_host(inv_g, d_inv, fb);
    s_host(rm_g, d_rm, fb);
    s_host(rv_g, d_rv, fb);
    s_host(dg_g, d_dg, fb);
    s_host(db_g, d_db, fb);
    int bad =
        s_same("mean", c, s, mean_g, mean_c, c, 4) ||
        s_same("inv", c, s, inv_g, inv_c, c, 4) ||
        s_same("running_mean", c, s, rm_g, rm_c, c, 4) ||
        s_same("running_var", c, s, rv_g, rv_c, c, 4) ||
        s_same("y", c, s, y_g, y_c, n, 2) || s_same("dbeta", c, s, db_g, db_c, c, 4) ||
        s_same("dgamma", c, s, dg_g, dg_c, c, 4) || s_same("dx", c, s, dx_g, dx_c, n, 2);
    if (!bad)
        printf("c=%d s=%ld: the same bits\n", c, s);
    void *dev[] = {d_x,  d_dy,   d_dx,  d_y,  d_g,  d_b,   d_rm,
                   d_rv, d_mean, d_inv, d_dg, d_db, d_part};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        cudaFree(dev[i]);
    cudaStreamDestroy(st);
    free(x), free(dy), free(dx0), free(y_c), free(dx_c), free(y_g), free(dx_g), free(f);
    return bad;
}

int main(void)
{
    /* lanes of 16 and of 8 with several runs of the 8 loads a thread makes
       at a time and a tail after them; one lane, threads taking several
       channels (c > 256), the same; lanes of 85 over chunks of a position
       or none; fewer positions than chunks */
    static const struct {
        int c;
        long s;
    } cases[] = {{16, 256L * 28 * 28 + 13}, {32, 100003}, {300, 9001}, {3, 300}, {16, 7}};
    int bad = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        bad |= s_case(cases[k].c, cases[k].s);
    return bad;
}
