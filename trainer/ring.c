/*  ring.c - the ring all-reduce's schedule shared by the host and device
    rings (see ring.h). */
#include "trainer/ring.h"

#include <stddef.h>

int trn_ring_place(const int *group, int gn, int rank, int *right, int *left)
{
    int me = -1;
    for (int i = 0; i < gn && me < 0; i++)
        if ((group ? group[i] : i) == rank)
            me = i;
    if (me < 0)
        return -1;
    int r = (me + 1) % gn, l = (me + gn - 1) % gn;
    *right = group ? group[r] : r;
    *left = group ? group[l] : l;
    return me;
}

void trn_ring_chunk(long n, int p, int i, long *off, long *len)
{
    long base = n / p, extra = n % p;
    *off = (long)i * base + (i < extra ? i : extra);
    *len = base + (i < extra ? 1 : 0);
}

void trn_ring_step(int p, int me, int phase, int s, int *send, int *recv)
{
    if (phase == 0) {
        *send = ((me - s) % p + p) % p;
        *recv = ((me - s - 1) % p + p) % p;
    } else {
        *send = ((me + 1 - s) % p + p) % p;
        *recv = ((me - s) % p + p) % p;
    }
}

int trn_ring_owned(int p, int me)
{
    return (me + 1) % p;
}

trn_ring_move trn_ring_move_at(long n, int p, int me, int phase, int s)
{
    int sc, rc;
    trn_ring_move m;
    trn_ring_step(p, me, phase, s, &sc, &rc);
    trn_ring_chunk(n, p, sc, &m.soff, &m.slen);
    trn_ring_chunk(n, p, rc, &m.roff, &m.rlen);
    return m;
}
