/*  blaskern.h - which BLAS kernels run, chosen from the CPU's own cpuid.

    Debian's OpenBLAS (DYNAMIC_ARCH) picks its kernels from a table of CPU
    models it knew when it was built; on a newer or virtualised CPU it can
    fall back to its SSE3 `Prescott` kernels on a machine with AVX-512 and
    run at half the speed without a word. The core is fixed in the
    library's constructor, before main(), from OPENBLAS_CORETYPE. So the
    programs that multiply matrices (jizhi-train, the controller that runs
    the bo GP) call blaskern_choose(argv) first thing in main(): it reads
    the instruction set with cpuid (and what the OS saves, xgetbv), and
    when the running core is narrower than the CPU allows it re-executes
    the program once with OPENBLAS_CORETYPE set to the matching core.

    Environment:
      OPENBLAS_CORETYPE  set by the user: respected (a warning says so when
                         it is narrower than the CPU allows)
      JIZHI_BLAS_CORE    "keep": never re-execute; "cpuid": the cpuid
                         choice even over OPENBLAS_CORETYPE; a core name
                         (SkylakeX, Haswell, ...): that core; unset or
                         "auto": the default above

    The module keeps one static record of what it chose (written once by
    blaskern_choose before any thread starts, read-only afterwards).
    Everything works without OpenBLAS (its functions are looked up with
    dlsym): the core is then "unknown" and nothing is re-executed.
*/
#ifndef JZ_BLASKERN_H
#define JZ_BLASKERN_H

#include <stddef.h>

/* Instruction-set levels, in the order kernels get faster. */
typedef enum {
    BLASKERN_UNKNOWN = 0, /* not x86-64, or a core name not in the table */
    BLASKERN_SSE,         /* 128-bit (OpenBLAS Prescott, Nehalem, ...) */
    BLASKERN_AVX,         /* 256-bit without FMA (Sandybridge) */
    BLASKERN_AVX2,        /* 256-bit with FMA (Haswell, Zen) */
    BLASKERN_AVX512       /* 512-bit (SkylakeX, Cooperlake) */
} blaskern_level;

typedef struct {
    blaskern_level cpu_level;  /* what cpuid and the OS allow */
    blaskern_level core_level; /* what the running kernels use */
    char cpu_core[32];         /* the OpenBLAS core for cpu_level ("" if none) */
    char core[32];             /* the core OpenBLAS runs, or "unknown" */
    char cpu_flags[160];       /* the features seen, e.g. "avx2 fma avx512f ..." */
    char how[128];             /* how the core was chosen, in words */
    int fallback;              /* 1: the kernels are narrower than the CPU allows */
} blaskern_info;

/* Call first in main(), before any BLAS call or thread: may re-execute
   the program (execv of /proc/self/exe with the same argv) with
   OPENBLAS_CORETYPE set; returns when it did not or could not (the
   record then says why). argv is borrowed. */
void blaskern_choose(char **argv);

/* Fills *out with what runs (blaskern_choose's record; without that call,
   what OpenBLAS picked itself). */
void blaskern_get(blaskern_info *out);

/* Vector width in bits of a level (128, 256, 512; 0 for unknown). */
int blaskern_bits(blaskern_level level);

/* One line for people: "OpenBLAS 0.3.21 core SkylakeX (512-bit; CPU:
   avx512 ...; chosen by ...)". Returns what snprintf returns. */
int blaskern_describe(char *buf, size_t len);

/* A warning line when the kernels are narrower than the CPU allows
   (else buf is set to ""). Returns 1 when there is a warning. */
int blaskern_warning(char *buf, size_t len);

#endif
