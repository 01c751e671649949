/*  exit_how.h - how a trial's attempt ended, as a dispatcher reports it
    (docs/PROTOCOL.md, `exited`'s `how`): one enum the controller decides
    on, and its wire text, turned to and from the enum only here
    (exit_how.c). The store keeps the text (trials.exit_how).
*/
#ifndef JZ_EXIT_HOW_H
#define JZ_EXIT_HOW_H

typedef enum {
    EXIT_OTHER = 0,    /* a text this controller does not know (a newer dispatcher) */
    EXIT_EXITED,       /* the process exited by itself; `code` is its status */
    EXIT_SIGNALED,     /* a signal it did not get from us; `signal` names it */
    EXIT_TIMEOUT,      /* killed after the spec's timeout_s (or the backend's limit) */
    EXIT_KILLED,       /* killed on the controller's request */
    EXIT_START_FAILED, /* it could not be started */
    EXIT_LOST,         /* the backend lost it (preempted, node failure) */
    EXIT_HOW_COUNT
} exit_how;

/* The wire's text of h ("exited", "signaled", ...); "" for EXIT_OTHER or
   a value out of range. Static. */
const char *exit_how_name(exit_how h);
/* The kind a wire text names, or EXIT_OTHER (NULL or unknown text). */
exit_how exit_how_parse(const char *text);

#endif
