/*  util.h - small helpers shared by the daemons.

    Out-of-memory policy. The daemons (controller, dispatcher) allocate
    through util_xmalloc and friends: when memory runs out they log one
    line and abort(). A half-applied state change after a failed
    allocation would be worse than a restart, and the store makes a
    restart safe (the controller resumes from its database). The trial
    helper library never aborts its host program: it checks every
    allocation and reports failure through its return values.
*/
#ifndef JZ_UTIL_H
#define JZ_UTIL_H

#include <stddef.h>

/* Fills out with 2*nbytes lowercase hex digits of random bytes from
   /dev/urandom (a clock-and-pid seeded generator when that cannot be
   read), NUL-terminated. out must hold 2*nbytes + 1 bytes. */
void util_random_hex(char *out, size_t nbytes);

/* Allocators that abort with a log line when memory runs out. */
void *util_xmalloc(size_t size);
void *util_xcalloc(size_t n, size_t size);
void *util_xrealloc(void *p, size_t size);
char *util_xstrdup(const char *s);

#endif
