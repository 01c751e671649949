/*  ident.h - who may do what: users' roles and the actions they allow.

    One place for the roles every front door checks (today the web API's
    bearer tokens; later the controller's CURVE keys and Unix uids map onto
    the same user name + role). Roles are an enum; ident_role_str and
    ident_role_parse are the only conversions to and from text.

    admin       everything, on every user's studies
    user        submit studies; steer (stop, resume, set, pause) studies
    viewer      read only
    dispatcher  runs trials (register, start, report exits); never steers

    Bearer tokens (the web API's, made by `jizhi token create`) are
    "jzt_" + 64 hex digits of randomness; only their SHA-256 is stored.

    No allocation; thread-safe.
*/
#ifndef JZ_IDENT_H
#define JZ_IDENT_H

#include <stddef.h>

typedef enum {
    IDENT_NONE = 0, /* not identified */
    IDENT_ADMIN,
    IDENT_USER,
    IDENT_VIEWER,
    IDENT_DISPATCHER,
} ident_role;

/* What a request wants to do. */
typedef enum {
    IDENT_READ = 0,   /* list, show, curves, events */
    IDENT_SUBMIT,     /* submit a study */
    IDENT_STEER,      /* stop/resume a study; stop/pause/resume/set a trial */
    IDENT_RUN,        /* dispatcher work: register, start, report exits */
    IDENT_ADMINISTER, /* tokens, keys, quotas */
} ident_action;

/* An identity: a user name and a role. Value struct on caller storage. */
typedef struct {
    char user[64]; /* [A-Za-z0-9_.@-]{1,63} */
    ident_role role;
} ident_t;

/* "admin", "user", "viewer", "dispatcher", "none". Never NULL. */
const char *ident_role_str(ident_role r);

/* Parses a role name. 0, or -1 when `text` is not one of the four. */
int ident_role_parse(const char *text, ident_role *out);

/* 1 when `name` is a valid user name ([A-Za-z0-9_.@-], 1 to 63 chars). */
int ident_valid_user(const char *name);

/* 1 when role `r` may do `a`. Ownership of studies is checked by the
   caller (issue 10); this is the role part only. */
int ident_allows(ident_role r, ident_action a);

#define IDENT_TOKEN_LEN 68 /* "jzt_" + 64 hex digits */
#define IDENT_HASH_LEN 64  /* SHA-256 in hex */

/* Writes a fresh random token (IDENT_TOKEN_LEN chars + NUL) into out.
   0, or -1 when no randomness is available. */
int ident_token_new(char out[IDENT_TOKEN_LEN + 1]);

/* Writes the hex SHA-256 of `token` (IDENT_HASH_LEN chars + NUL). */
void ident_token_hash(const char *token, char out[IDENT_HASH_LEN + 1]);

#define IDENT_TAG_LEN 16 /* an attempt's tag: the first hex digits of that hash */

/* Writes the tag of a trial attempt's secret token (its JIZHI_TOKEN):
   IDENT_TAG_LEN hex digits + NUL, the start of ident_token_hash. Public:
   a Slurm job's comment carries it, so that a dispatcher that takes the
   job back can tell whether it is the controller's current attempt. */
void ident_attempt_tag(const char *token, char out[IDENT_TAG_LEN + 1]);

/* 1 when `text` has a token's shape (prefix, length, hex digits). */
int ident_token_wellformed(const char *text);

#endif
