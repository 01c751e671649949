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

/* What a handler gets (ctl_msg): ctl_types.h. */

typedef void (*ctl_handler)(ctl_t *c, const ctl_msg *m);

extern const ctl_handler ctl__msg_trial_handlers[MSG_COUNT]; /* ctl_msg.c */
extern const ctl_handler ctl__msg_disp_handlers[MSG_COUNT];  /* ctl_msg_disp.c */
extern const ctl_handler ctl__msg_cli_handlers[MSG_COUNT];   /* ctl_msg_cli.c */

/* ctl__msg_int, ctl__msg_str and ctl__msg_error, which every handler file
   uses: ctl_svc.h. */

#endif
