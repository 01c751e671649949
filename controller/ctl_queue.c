/*  ctl_queue.c - the queue: which waiting trial gets a free slot. */
#include "ctl_internal.h"

#include "../common/util.h"

#include <stdlib.h>

struct ctl_queue {
    int unused;
};

int ctl__queue_init(ctl_t *c, char *err, size_t errsize)
{
    (void)err;
    (void)errsize;
    c->queue = util_xcalloc(1, sizeof *c->queue);
    return 0;
}

void ctl__queue_free(ctl_t *c)
{
    free(c->queue);
    c->queue = NULL;
}
