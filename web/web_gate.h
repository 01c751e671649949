/*  web_gate.h - a bound on how many expensive reads run at once.

    The server runs one thread per connection, so without a bound N
    clients asking for a costly answer (an importance fit, a whole study's
    detail) cost N times its CPU and memory at once. A gate lets `max` in;
    the next ones wait up to a given time for a place, then are refused
    (the handler answers 503 with Retry-After). Thread-safe.
*/
#ifndef JZ_WEB_GATE_H
#define JZ_WEB_GATE_H

#include <pthread.h>

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int busy; /* places taken */
    int max;  /* places */
} web_gate;

/* Initialises g on caller storage with `max` places (>= 1). */
void web_gate_init(web_gate *g, int max);
/* Releases what init took. No one may be inside. */
void web_gate_fini(web_gate *g);
/* Takes a place: 0, or -1 when none came free within wait_ms (0: do not
   wait). A 0 must be followed by web_gate_leave. */
int web_gate_enter(web_gate *g, int wait_ms);
/* Gives the place back and wakes one waiter. */
void web_gate_leave(web_gate *g);

#endif
