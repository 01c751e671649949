/*  ctl_idmap.h - trial id -> trial, an open-addressing hash map (linear
    probing, power-of-two capacity, at most half full) so that a trial
    message finds its trial in O(1) instead of a walk over every study.

    The map borrows the trials: it never frees them. Ids are > 0 (trial
    ids from the store); 0 marks an empty slot. Trials are never removed
    while the controller runs (a study's trials stay loaded until the
    controller is destroyed), so there is no delete.
*/
#ifndef JZ_CTL_IDMAP_H
#define JZ_CTL_IDMAP_H

#include <stddef.h>

typedef struct {
    long *keys;  /* 0: empty */
    void **vals; /* borrowed */
    size_t cap;  /* 0 or a power of two */
    size_t count;
} ctl_idmap;

/* Maps id (> 0) to val, replacing an earlier value. Aborts through the
   allocator's policy when memory runs out (ctl_internal.h). */
void ctl_idmap_put(ctl_idmap *m, long id, void *val);
/* The value for id, or NULL. */
void *ctl_idmap_get(const ctl_idmap *m, long id);
/* Releases the table (not the values) and empties the map. */
void ctl_idmap_clear(ctl_idmap *m);

#endif
