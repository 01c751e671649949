/*  ring.h - the ring all-reduce's schedule, written once for both of its
    implementations: the host ring of the comm layer (comm.c,
    trn_comm_ring, and its top-k all-gather) and the device ring of the
    GPU-resident exchange (dist_dev.cu, over NCCL send/recv). Which rank is
    whose neighbour, how n floats are cut into chunks, and which chunk each
    step sends and receives. Pure functions (no communication, no CUDA), so
    every machine's unit tests check them (tests/test_trn_devplan.c).
    Errors: none beyond trn_ring_place's -1 (sizes are the caller's).
*/
#ifndef TRN_RING_H
#define TRN_RING_H

/* Position of `rank` in the ring group[0..gn) (group NULL: the ranks
   0 .. gn-1 in order) and its neighbours' ranks: *right is sent to, *left
   received from. Returns the position, or -1 when rank is not in the
   group (*right and *left untouched). */
int trn_ring_place(const int *group, int gn, int rank, int *right, int *left);

/* Chunk i of n floats cut over p ranks (the first n % p chunks one
   longer). */
void trn_ring_chunk(long n, int p, int i, long *off, long *len);

/* Step s (0 .. p-2) of the ring at position me of p: phase 0 reduce-scatter
   (the received chunk is added), 1 all-gather (it is copied). *send is the
   chunk sent to the right neighbour, *recv the one received from the left.
   After the reduce-scatter position me owns chunk trn_ring_owned(p, me). */
void trn_ring_step(int p, int me, int phase, int s, int *send, int *recv);
int trn_ring_owned(int p, int me);

/* Step s of the ring (trn_ring_step) as ranges of the n floats: the chunk
   sent is [soff, soff + slen), the one received [roff, roff + rlen). */
typedef struct {
    long soff, slen, roff, rlen;
} trn_ring_move;
trn_ring_move trn_ring_move_at(long n, int p, int me, int phase, int s);

#endif
