/*  ctl_idmap.c - trial id -> trial hash map (see ctl_idmap.h). */
#include "ctl_idmap.h"

#include "../common/util.h"

#include <stdint.h>
#include <stdlib.h>

static size_t s_slot(long id, size_t cap)
{
    uint64_t x = (uint64_t)id * 0x9E3779B97F4A7C15ULL; /* Fibonacci hashing */
    return (size_t)(x >> 32) & (cap - 1);
}

static void s_grow(ctl_idmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    long *keys = util_xcalloc(cap, sizeof *keys);
    void **vals = util_xcalloc(cap, sizeof *vals);
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        size_t k = s_slot(m->keys[i], cap);
        while (keys[k])
            k = (k + 1) & (cap - 1);
        keys[k] = m->keys[i];
        vals[k] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
}

void ctl_idmap_put(ctl_idmap *m, long id, void *val)
{
    if (id <= 0)
        return;
    if (2 * (m->count + 1) > m->cap)
        s_grow(m);
    size_t k = s_slot(id, m->cap);
    while (m->keys[k] && m->keys[k] != id)
        k = (k + 1) & (m->cap - 1);
    if (!m->keys[k])
        m->count++;
    m->keys[k] = id;
    m->vals[k] = val;
}

void *ctl_idmap_get(const ctl_idmap *m, long id)
{
    if (id <= 0 || !m->cap)
        return NULL;
    for (size_t k = s_slot(id, m->cap); m->keys[k]; k = (k + 1) & (m->cap - 1))
        if (m->keys[k] == id)
            return m->vals[k];
    return NULL;
}

void ctl_idmap_clear(ctl_idmap *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->count = 0;
}
