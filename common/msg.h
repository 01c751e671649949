/*  msg.h - the wire protocol's message schema: one row per message type.

    Every message of docs/PROTOCOL.md is described once here: who sends it,
    who receives it, the identity the controller checks for it (a trial's
    token, a registered dispatcher name, or none), the action the sender's
    role must allow (ident.h), and its fields with their JSON types. The
    receivers dispatch through it: the controller's command table is a view
    of it (controller/ctl_msg.c), and so are the dispatcher's
    (dispatcher/disp_recv.c) and the trial helper's (trial_helper/jz_conn.c).
    msg_decode checks the fields once, before a handler sees the message:
    a handler may then trust that every required field is there with its
    type, and that an optional field is absent, null or of its type. Ranges
    and meanings (a slot count >= 0, a known instruction kind) are the
    handler's to check.

    A row's fields are a text, "name:type" separated by spaces, with a `?`
    after the name for an optional field: "trial:int token:str pid?:int".
    Types: int (a JSON integer), num (a number, or "nan", "inf", "-inf":
    wire_to_double), str, bool, array, object.

    Adding a message: a msg_type value, a row in common/msg.c, its handler
    in the receiver's table, and its line in docs/PROTOCOL.md (test_msg
    checks the last). No allocation; thread-safe (the table is constant).
*/
#ifndef JZ_MSG_H
#define JZ_MSG_H

#include <jansson.h>
#include <stddef.h>

/* The peers of the protocol. */
typedef enum {
    MSG_CTL,   /* the controller */
    MSG_TRIAL, /* a trial's helper (libjizhi, jizhi report) */
    MSG_DISP,  /* a dispatcher */
    MSG_CLI,   /* the CLI, the web server: requests */
    MSG_ANY,   /* replies go to whoever asked */
} msg_peer;

/* The identity the controller checks before the handler runs. */
typedef enum {
    MSG_AUTH_NONE,  /* no identity beyond the role's action */
    MSG_AUTH_TRIAL, /* `trial` + `token` of a loaded trial */
    MSG_AUTH_DISP,  /* `name` of a registered dispatcher bound to the sender */
} msg_auth;

/* action: an ident_action the sender's role must allow, or MSG_ACT_FREE
   (a trial's token is its identity; ping answers anyone; messages the
   controller sends). */
#define MSG_ACT_FREE (-1)

/* Every message type. Replies (`ok`, `error`) are one type each, whoever
   receives them. */
typedef enum {
    /* trial -> controller */
    MSG_HELLO,
    MSG_METRICS,
    MSG_TRIAL_HEARTBEAT,
    MSG_INS_ACK,
    MSG_CHECKPOINT_DONE,
    /* dispatcher -> controller */
    MSG_REGISTER,
    MSG_DISP_HEARTBEAT,
    MSG_STARTED,
    MSG_EXITED,
    MSG_LOG_DATA,
    /* CLI -> controller */
    MSG_SUBMIT,
    MSG_STATUS,
    MSG_STUDY_STOP,
    MSG_STUDY_RESUME,
    MSG_STUDY_ENQUEUE,
    MSG_STUDY_EXTEND,
    MSG_STUDY_DELETE,
    MSG_STUDY_COPY,
    MSG_TRIAL_STOP,
    MSG_TRIAL_PAUSE,
    MSG_TRIAL_RESUME,
    MSG_TRIAL_SET,
    MSG_TRIAL_FORK,
    MSG_TRIAL_ASK,
    MSG_TRIAL_TELL,
    MSG_READ,
    MSG_READ_LOG,
    MSG_PING,
    MSG_QUEUE,
    MSG_QUOTA_SET,
    MSG_DISP_RELEASE,
    /* controller -> trial */
    MSG_INSTRUCTION,
    /* controller -> dispatcher */
    MSG_START,
    MSG_KILL,
    MSG_DISOWN,
    MSG_DISP_READ_LOG, /* "read_log", relayed to the dispatcher holding the log */
    /* controller -> whoever asked */
    MSG_OK,
    MSG_ERROR,
    MSG_COUNT
} msg_type;

/* One row of the schema. */
typedef struct {
    msg_type type;
    const char *name;   /* the wire's "type" */
    msg_peer from, to;  /* sender and receiver */
    msg_auth auth;      /* what the controller checks (MSG_AUTH_NONE elsewhere) */
    int action;         /* ident_action, or MSG_ACT_FREE */
    const char *fields; /* "name:type name?:type ..." (see above) */
} msg_def;

/* JSON types of fields. */
typedef enum {
    MSG_T_INT,
    MSG_T_NUM,
    MSG_T_STR,
    MSG_T_BOOL,
    MSG_T_ARRAY,
    MSG_T_OBJECT,
} msg_jtype;

/* One field of a row, as msg_field_next reads it. */
typedef struct {
    char name[32];
    msg_jtype type;
    int optional;
} msg_field;

/* The row of type t. Never NULL for t < MSG_COUNT (asserted). */
const msg_def *msg_def_of(msg_type t);

/* The row named `name` that `to` receives, or NULL (no such type, or not
   one `to` receives). `name` may be NULL (NULL then). */
const msg_def *msg_find(const char *name, msg_peer to);

/* Reads the next field of a row's field text at *cursor (start with
   def->fields) into *out and advances the cursor. 1 when a field was
   read, 0 at the end. The table's texts are well formed (test_msg). */
int msg_field_next(const char **cursor, msg_field *out);

/* 1 when v is of type t (for an int: a JSON integer; num: what
   wire_to_double reads). */
int msg_jtype_is(msg_jtype t, const json_t *v);

/* "an integer", "a number", "a string", "a boolean", "an array", "an
   object". Never NULL. */
const char *msg_jtype_name(msg_jtype t);

/* Checks msg's fields against def: every required field present with its
   type, every optional one absent, null or of its type. 0, or -1 with err
   naming the field ("field 'slots': expected an integer"). Changes
   nothing. */
int msg_check(const msg_def *def, const json_t *msg, char *err, size_t errsize);

/* msg_find on msg's "type" and msg_check. The row, or NULL with err
   ("unknown message type \"x\"", or the field's error). msg is borrowed. */
const msg_def *msg_decode(const json_t *msg, msg_peer to, char *err, size_t errsize);

/* The error codes an `error` reply may carry (docs/PROTOCOL.md), in a
   NULL-terminated list. */
extern const char *const msg_error_codes[];

/* "controller", "trial", "dispatcher", "cli", "any". Never NULL. */
const char *msg_peer_name(msg_peer p);

#endif
