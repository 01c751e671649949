/*  comm_local.c - the one-rank backend: no peers, so the algorithms never
    call it for data (they return at size 1); its calls succeed as the
    identity. The default when jizhi-train runs without an MPI launcher. */
#include <stdlib.h>

#include "trainer/comm.h"

static int s_sendrecv(void *self, const void *sbuf, size_t sbytes, int dst, void *rbuf,
                      size_t rbytes, int src)
{
    (void)self, (void)sbuf, (void)sbytes, (void)rbuf, (void)rbytes;
    return dst < 0 && src < 0 ? 0 : -1; /* there is nobody to talk to */
}

static int s_allreduce_f(void *self, float *buf, long n)
{
    (void)self, (void)buf, (void)n;
    return 0;
}

static int s_allreduce_d(void *self, double *buf, long n)
{
    (void)self, (void)buf, (void)n;
    return 0;
}

static int s_bcast(void *self, void *buf, size_t bytes, int root)
{
    (void)self, (void)buf, (void)bytes;
    return root == 0 ? 0 : -1;
}

static int s_barrier(void *self)
{
    (void)self;
    return 0;
}

static const trn_comm_ops s_ops = {"local",       s_sendrecv, s_allreduce_f,
                                   s_allreduce_d, s_bcast,    s_barrier,
                                   NULL,          NULL,       NULL};

trn_comm *trn_comm_local_new(char *err)
{
    trn_comm *c = calloc(1, sizeof *c);
    if (c)
        c->node = calloc(1, sizeof(int));
    if (!c || !c->node) {
        free(c);
        snprintf(err, TRN_ERRLEN, "out of memory");
        return NULL;
    }
    c->ops = &s_ops;
    c->rank = 0;
    c->size = 1;
    return c;
}
