/*  backend_cpu.c - the CPU backend: OpenBLAS GEMMs (kernels_f32.c) and,
    where the build has it, oneDNN's convolutions (conv_dnnl.c) on all
    cores. The CPU path is the trainer's default; this file owns the thread
    setup. Device backends (backend_cuda.cu) plug in through trn_backend. */
#define _GNU_SOURCE
#include <cblas.h>
#include <sched.h>
#include <unistd.h>

#include "trainer/conv_dnnl.h"
#include "trainer/trn.h"

int trn_cpu_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0)
            return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void trn_cpu_set_threads(int n)
{
    openblas_set_num_threads(n > 0 ? n : trn_cpu_cores());
    trn_dnnl_set_threads(n > 0 ? n : trn_cpu_cores());
}
