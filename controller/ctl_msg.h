/*  ctl_msg.h - what the controller's message handlers share (internal to
    controller/): the message a handler gets, and the handler tables of
    the three kinds of sender. Each table is indexed by msg_type and holds
    the handlers of its file; ctl__handle (ctl_msg.c) finds a type's
    handler in them after checking the sender's role, its identity and the
    schema's fields (common/msg.h). A handler may trust every field the
    schema's row lists as required, and every optional one to be absent,
    null or of its type.
*/
#ifndef JZ_CTL_MSG_H
#define JZ_CTL_MSG_H

#include "ctl_internal.h"

#include "../common/msg.h"

/* What a handler gets: the message, its sender, and the sender's
   identity as the schema's row established it. All borrowed. */
typedef struct {
    const wire_peer *from;
    json_t *msg;
    long req;             /* the request's `req`, -1 when none */
    ctl_trial *trial;     /* MSG_AUTH_TRIAL: the authenticated trial */
    ctl_disp *disp;       /* MSG_AUTH_DISP: the registered dispatcher */
    const ctl_ident *who; /* the sender as the transport identified it */
} ctl_msg;

typedef void (*ctl_handler)(ctl_t *c, const ctl_msg *m);

extern const ctl_handler ctl__msg_trial_handlers[MSG_COUNT]; /* ctl_msg.c */
extern const ctl_handler ctl__msg_disp_handlers[MSG_COUNT];  /* ctl_msg_disp.c */
extern const ctl_handler ctl__msg_cli_handlers[MSG_COUNT];   /* ctl_msg_cli.c */

/* A field of m's message as the schema's row has it (common/msg.h): a
   required one is there with its type, so a handler reads it without
   checking; an optional one absent or null gives 0 or NULL. Borrowed. */
long ctl__msg_int(const ctl_msg *m, const char *key);
const char *ctl__msg_str(const ctl_msg *m, const char *key);

/* Answers `error` with `code` and `text` (changes nothing). */
void ctl__msg_error(ctl_t *c, const wire_peer *to, long req, const char *code,
                    const char *text);

#endif
