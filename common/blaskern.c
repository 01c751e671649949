/*  blaskern.c - the BLAS kernels chosen from cpuid (see blaskern.h).

    OpenBLAS is reached through dlsym only, so every program and library
    that links common/ keeps working without it (the core is "unknown").
    The core names and their instruction sets are those of OpenBLAS's
    DYNAMIC_ARCH table (driver/others/dynamic.c).
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_DEFAULT */
#endif
#include "common/blaskern.h"
#include "common/util.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define S_X86 1
#endif

/* The re-executed process learns from this what OpenBLAS had picked. */
#define S_REEXEC_ENV "JIZHI_BLAS_REEXEC"

static blaskern_info s_info; /* written once by blaskern_choose */
static int s_chosen;

static const struct {
    const char *name;
    blaskern_level level;
} s_cores[] = {
    {"SapphireRapids", BLASKERN_AVX512},
    {"Cooperlake", BLASKERN_AVX512},
    {"SkylakeX", BLASKERN_AVX512},
    {"Haswell", BLASKERN_AVX2},
    {"Zen", BLASKERN_AVX2},
    {"Sandybridge", BLASKERN_AVX},
    {"Bulldozer", BLASKERN_AVX},
    {"Piledriver", BLASKERN_AVX},
    {"Steamroller", BLASKERN_AVX},
    {"Excavator", BLASKERN_AVX},
    {"Prescott", BLASKERN_SSE},
    {"Core2", BLASKERN_SSE},
    {"Penryn", BLASKERN_SSE},
    {"Dunnington", BLASKERN_SSE},
    {"Nehalem", BLASKERN_SSE},
    {"Atom", BLASKERN_SSE},
    {"Nano", BLASKERN_SSE},
    {"Opteron", BLASKERN_SSE},
    {"Opteron(SSE3)", BLASKERN_SSE},
    {"Barcelona", BLASKERN_SSE},
    {"Bobcat", BLASKERN_SSE},
    {"Athlon", BLASKERN_SSE},
    {"Katmai", BLASKERN_SSE},
    {"Coppermine", BLASKERN_SSE},
    {"Northwood", BLASKERN_SSE},
    {"Banias", BLASKERN_SSE},
};

/* The core OpenBLAS uses for a level (the first of its kind above). */
static const char *s_core_for(blaskern_level l)
{
    switch (l) {
    case BLASKERN_AVX512:
        return "SkylakeX"; /* Cooperlake adds bf16 GEMM only; same sgemm/dgemm */
    case BLASKERN_AVX2:
        return "Haswell";
    case BLASKERN_AVX:
        return "Sandybridge";
    default:
        return "";
    }
}

static blaskern_level s_core_level(const char *core)
{
    for (size_t i = 0; i < sizeof s_cores / sizeof s_cores[0]; i++)
        if (!strcasecmp(core, s_cores[i].name))
            return s_cores[i].level;
    return BLASKERN_UNKNOWN;
}

int blaskern_bits(blaskern_level level)
{
    switch (level) {
    case BLASKERN_SSE:
        return 128;
    case BLASKERN_AVX:
    case BLASKERN_AVX2:
        return 256;
    case BLASKERN_AVX512:
        return 512;
    default:
        return 0;
    }
}

static void s_flag(char *buf, size_t len, int on, const char *name)
{
    size_t n = strlen(buf);
    if (on && n + strlen(name) + 2 < len)
        snprintf(buf + n, len - n, "%s%s", n ? " " : "", name);
}

/* The instruction set the CPU has and the OS saves the registers of. */
static blaskern_level s_cpu_level(char *flags, size_t len)
{
    flags[0] = 0;
#ifdef S_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return BLASKERN_UNKNOWN;
    int sse3 = c & 1, fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    unsigned long long xcr0 = 0;
    if (osxsave) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = ((unsigned long long)hi << 32) | lo;
    }
    int ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6;
    unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0, x;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, x, b7, c7, d7);
        unsigned y, z;
        __cpuid_count(7, 1, a71, x, y, z);
        (void)y, (void)z;
    }
    (void)c7;
    int avx2 = (b7 >> 5) & 1, f = (b7 >> 16) & 1, dq = (b7 >> 17) & 1,
        cd = (b7 >> 28) & 1, bw = (b7 >> 30) & 1, vl = (b7 >> 31) & 1;
    s_flag(flags, len, sse3, "sse3");
    s_flag(flags, len, avx, "avx");
    s_flag(flags, len, fma, "fma");
    s_flag(flags, len, avx2, "avx2");
    s_flag(flags, len, f, "avx512f");
    s_flag(flags, len, bw && vl && dq && cd, "avx512bw/vl/dq/cd");
    s_flag(flags, len, (a71 >> 5) & 1, "avx512_bf16");
    s_flag(flags, len, (d7 >> 23) & 1, "avx512_fp16");
    s_flag(flags, len, (d7 >> 22) & 1, "amx_bf16");
    if (avx && !ymm)
        s_flag(flags, len, 1, "(OS saves no AVX state)");
    else if (f && !zmm)
        s_flag(flags, len, 1, "(OS saves no AVX-512 state)");
    if (f && bw && vl && dq && cd && zmm)
        return BLASKERN_AVX512;
    if (avx2 && fma && ymm)
        return BLASKERN_AVX2;
    if (avx && ymm)
        return BLASKERN_AVX;
    return BLASKERN_SSE;
#else
    (void)len;
    return BLASKERN_UNKNOWN;
#endif
}

/* What OpenBLAS runs now: its core name and "OpenBLAS x.y.z". */
static void s_openblas(char *core, size_t clen, char *lib, size_t llen)
{
    char *(*corename)(void) =
        (char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_corename");
    char *(*config)(void) = (char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_config");
    const char *cn = corename ? corename() : NULL;
    snprintf(core, clen, "%s", cn && *cn ? cn : "unknown");
    const char *cf = config ? config() : NULL;
    if (!cf)
        snprintf(lib, llen, "%s", corename ? "OpenBLAS" : "a BLAS other than OpenBLAS");
    else { /* "OpenBLAS 0.3.21 DYNAMIC_ARCH ...": the first two words */
        const char *sp = strchr(cf, ' ');
        sp = sp ? strchr(sp + 1, ' ') : NULL;
        int n = sp ? (int)(sp - cf) : (int)strlen(cf);
        snprintf(lib, llen, "%.*s", n, cf);
    }
}

static char s_lib[64];

static void s_fill(blaskern_info *in)
{
    memset(in, 0, sizeof *in);
    in->cpu_level = s_cpu_level(in->cpu_flags, sizeof in->cpu_flags);
    snprintf(in->cpu_core, sizeof in->cpu_core, "%s", s_core_for(in->cpu_level));
    s_openblas(in->core, sizeof in->core, s_lib, sizeof s_lib);
    in->core_level = s_core_level(in->core);
    in->fallback = in->core_level != BLASKERN_UNKNOWN &&
                   in->cpu_level != BLASKERN_UNKNOWN && in->core_level < in->cpu_level;
}

void blaskern_choose(char **argv)
{
    blaskern_info *in = &s_info;
    s_fill(in);
    s_chosen = 1;
    const char *user = getenv("OPENBLAS_CORETYPE");
    const char *mode = getenv("JIZHI_BLAS_CORE");
    const char *was = getenv(S_REEXEC_ENV);
    if (was) { /* the second run: say what happened, never again */
        char before[32];
        snprintf(before, sizeof before, "%s", was);
        unsetenv(S_REEXEC_ENV); /* a child of ours decides for itself */
        int named = mode && *mode && strcmp(mode, "auto") && strcmp(mode, "cpuid") &&
                    strcmp(mode, "keep");
        if (user && !strcasecmp(user, in->core) && named)
            snprintf(in->how, sizeof in->how,
                     "JIZHI_BLAS_CORE=%.32s (OpenBLAS picked %s)", mode, before);
        else if (user && !strcasecmp(user, in->core))
            snprintf(in->how, sizeof in->how,
                     "set by jizhi from cpuid (OpenBLAS picked %s)", before);
        else
            snprintf(
                in->how, sizeof in->how,
                "OpenBLAS ignored OPENBLAS_CORETYPE=%.32s (not a DYNAMIC_ARCH build?)",
                user ? user : "");
        return;
    }
    const char *target = NULL;
    if (mode && !strcmp(mode, "keep"))
        target = NULL;
    else if (mode && *mode && strcmp(mode, "auto") && strcmp(mode, "cpuid"))
        target = mode; /* a core name */
    else if ((mode && !strcmp(mode, "cpuid")) || !user)
        target = in->fallback ? in->cpu_core : NULL;
    if (target && *target && strcasecmp(target, in->core) && argv && argv[0] &&
        in->core_level != BLASKERN_UNKNOWN && access("/proc/self/exe", X_OK) == 0) {
        char *keep = user ? strdup(user) : NULL;
        setenv("OPENBLAS_CORETYPE", target, 1);
        setenv(S_REEXEC_ENV, in->core, 1);
        fflush(NULL);
        util_reexec_self(argv);
        /* still here: carry on with the kernels we have */
        unsetenv(S_REEXEC_ENV);
        if (keep)
            setenv("OPENBLAS_CORETYPE", keep, 1);
        else
            unsetenv("OPENBLAS_CORETYPE");
        free(keep);
        snprintf(in->how, sizeof in->how,
                 "re-executing with OPENBLAS_CORETYPE=%.32s failed", target);
        return;
    }
    if (user)
        snprintf(in->how, sizeof in->how, "OPENBLAS_CORETYPE=%.32s from the environment",
                 user);
    else if (mode && !strcmp(mode, "keep"))
        snprintf(in->how, sizeof in->how, "OpenBLAS's own pick (JIZHI_BLAS_CORE=keep)");
    else
        snprintf(in->how, sizeof in->how, "OpenBLAS's own pick, as cpuid says");
}

void blaskern_get(blaskern_info *out)
{
    if (!s_chosen) { /* nobody chose: what OpenBLAS picked itself */
        s_fill(&s_info);
        snprintf(s_info.how, sizeof s_info.how, "OpenBLAS's own pick");
        s_chosen = 1;
    }
    *out = s_info;
}

int blaskern_describe(char *buf, size_t len)
{
    blaskern_info in;
    blaskern_get(&in);
    return snprintf(buf, len, "BLAS %s, kernels %s (%d-bit); CPU %d-bit (%s); %s", s_lib,
                    in.core, blaskern_bits(in.core_level), blaskern_bits(in.cpu_level),
                    in.cpu_flags[0] ? in.cpu_flags : "no cpuid", in.how);
}

int blaskern_warning(char *buf, size_t len)
{
    blaskern_info in;
    blaskern_get(&in);
    if (!in.fallback) {
        if (len)
            buf[0] = 0;
        return 0;
    }
    snprintf(buf, len,
             "BLAS kernels %s use %d-bit vectors on a CPU with %d-bit ones (%s would run "
             "them): matrix products run at about half the speed (%s; leave "
             "OPENBLAS_CORETYPE and JIZHI_BLAS_CORE unset, or set JIZHI_BLAS_CORE=cpuid)",
             in.core, blaskern_bits(in.core_level), blaskern_bits(in.cpu_level),
             in.cpu_core, in.how);
    return 1;
}
