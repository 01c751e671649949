/*  authkeys.h - the controller's authorized-keys file: which CURVE public
    key is which user, with which role.

    One entry per line: `<z85 public key> <user> <role>`, fields separated
    by spaces or tabs; role is admin, user, viewer or dispatcher
    (ident.h); blank lines and lines starting with '#' are ignored. A key
    may appear once. The first bad line makes the whole file bad, named
    with its line number ("line 3: unknown role \"root\"").

    Entries are kept sorted by key; lookups are a binary search.
*/
#ifndef JZ_AUTHKEYS_H
#define JZ_AUTHKEYS_H

#include "ident.h"
#include "keys.h"

#include <stddef.h>

typedef struct {
    char key[KEYS_Z85_LEN + 1];
    ident_t id;
    size_t line; /* its line in the file, from 1 */
} authkeys_entry;

/* A parsed file. Value struct: zero it (or authkeys_init), fill it with
   authkeys_parse/authkeys_load, free with authkeys_fini. */
typedef struct {
    authkeys_entry *v; /* owned, sorted by key */
    size_t n;
} authkeys_t;

void authkeys_init(authkeys_t *a);

/* Parses `text` into *out (replaced only on success). 0, or -1 with err
   "line N: ..." and *out untouched. */
int authkeys_parse(const char *text, authkeys_t *out, char *err, size_t errsize);

/* Reads and parses the file at path (at most 16 MB). A file that is not
   a regular file owned by this user or root, or that group or others may
   write, is refused. 0, or -1 with err naming the file. */
int authkeys_load(const char *path, authkeys_t *out, char *err, size_t errsize);

/* The identity of `key` (borrowed from a), or NULL when not listed. */
const ident_t *authkeys_find(const authkeys_t *a, const char *key);

/* Frees the entries; a is empty afterwards. NULL-safe. */
void authkeys_fini(authkeys_t *a);

#endif
