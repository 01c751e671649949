/*  authkeys.c - the authorized-keys file (see authkeys.h). */
#include "authkeys.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void authkeys_init(authkeys_t *a)
{
    a->v = NULL;
    a->n = 0;
}

void authkeys_fini(authkeys_t *a)
{
    if (!a)
        return;
    free(a->v);
    authkeys_init(a);
}

static int s_cmp(const void *x, const void *y)
{
    return strcmp(((const authkeys_entry *)x)->key, ((const authkeys_entry *)y)->key);
}

/* Splits the next whitespace-separated field of a line; NULL at its end. */
static char *s_field(char **p)
{
    char *s = *p + strspn(*p, " \t\r");
    if (!*s)
        return NULL;
    char *e = s + strcspn(s, " \t\r");
    if (*e)
        *e++ = 0;
    *p = e;
    return s;
}

/* Parses one line (modified in place) into e. 1 entry, 0 blank/comment,
   -1 bad (why in err). */
static int s_line(char *line, authkeys_entry *e, char *err, size_t errsize)
{
    char *p = line;
    char *key = s_field(&p);
    if (!key || key[0] == '#')
        return 0;
    char *user = s_field(&p), *role = user ? s_field(&p) : NULL;
    if (!role) {
        snprintf(err, errsize, "expected \"<z85 public key> <user> <role>\"");
        return -1;
    }
    if (s_field(&p)) {
        snprintf(err, errsize, "more than three fields");
        return -1;
    }
    if (!keys_valid_z85(key)) {
        snprintf(err, errsize, "\"%.60s\" is not a public key (40 z85 characters)", key);
        return -1;
    }
    if (!ident_valid_user(user)) {
        snprintf(err, errsize,
                 "user \"%.80s\": expected 1 to 63 of letters, digits, _ . @ -", user);
        return -1;
    }
    if (ident_role_parse(role, &e->id.role) != 0) {
        snprintf(err, errsize,
                 "unknown role \"%.40s\" (expected admin, user, viewer or dispatcher)",
                 role);
        return -1;
    }
    memcpy(e->key, key, KEYS_Z85_LEN + 1);
    snprintf(e->id.user, sizeof e->id.user, "%s", user);
    return 1;
}

int authkeys_parse(const char *text, authkeys_t *out, char *err, size_t errsize)
{
    authkeys_t a;
    authkeys_init(&a);
    size_t cap = 0, lineno = 0;
    const char *p = text;
    while (*p) {
        size_t len = strcspn(p, "\n");
        lineno++;
        char line[512], why[256];
        if (len >= sizeof line) {
            snprintf(err, errsize, "line %zu: longer than %zu characters", lineno,
                     sizeof line - 1);
            authkeys_fini(&a);
            return -1;
        }
        memcpy(line, p, len);
        line[len] = 0;
        p += len + (p[len] == '\n');
        authkeys_entry e;
        int r = s_line(line, &e, why, sizeof why);
        if (r < 0) {
            snprintf(err, errsize, "line %zu: %s", lineno, why);
            authkeys_fini(&a);
            return -1;
        }
        if (r == 0)
            continue;
        e.line = lineno;
        if (a.n == cap) {
            cap = cap ? cap * 2 : 16;
            authkeys_entry *nv = realloc(a.v, cap * sizeof *nv);
            if (!nv) {
                snprintf(err, errsize, "out of memory");
                authkeys_fini(&a);
                return -1;
            }
            a.v = nv;
        }
        a.v[a.n++] = e;
    }
    if (a.n)
        qsort(a.v, a.n, sizeof *a.v, s_cmp);
    for (size_t i = 1; i < a.n; i++)
        if (!strcmp(a.v[i - 1].key, a.v[i].key)) {
            size_t first = a.v[i - 1].line < a.v[i].line ? a.v[i - 1].line : a.v[i].line;
            size_t again = a.v[i - 1].line < a.v[i].line ? a.v[i].line : a.v[i - 1].line;
            snprintf(err, errsize, "line %zu: the key of line %zu again", again, first);
            authkeys_fini(&a);
            return -1;
        }
    authkeys_fini(out);
    *out = a;
    return 0;
}

int authkeys_load(const char *path, authkeys_t *out, char *err, size_t errsize)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errsize, "%s: %s", path, strerror(errno));
        return -1;
    }
    /* as ssh's StrictModes: a file another user could write would let
       them add a key of their own */
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || (st.st_mode & 022) ||
        (st.st_uid != geteuid() && st.st_uid != 0)) {
        snprintf(
            err, errsize,
            "%s: refused: it must be a regular file owned by this user (or root) and "
            "writable by no one else (mode %04o; chmod 600 it)",
            path, (unsigned)(st.st_mode & 07777));
        fclose(f);
        return -1;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - 1 - n, f)) > 0) {
        n += got;
        if (n == cap - 1) {
            if (cap >= 16u * 1024 * 1024) {
                free(buf);
                fclose(f);
                snprintf(err, errsize, "%s: larger than 16 MB", path);
                return -1;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) {
        snprintf(err, errsize, "%s: out of memory", path);
        return -1;
    }
    buf[n] = 0;
    if (memchr(buf, 0, n)) {
        free(buf);
        snprintf(err, errsize, "%s: not a text file", path);
        return -1;
    }
    char why[400];
    int rc = authkeys_parse(buf, out, why, sizeof why);
    free(buf);
    if (rc != 0)
        snprintf(err, errsize, "%s: %s", path, why);
    return rc;
}

const ident_t *authkeys_find(const authkeys_t *a, const char *key)
{
    if (!a->n || !key)
        return NULL;
    authkeys_entry k;
    snprintf(k.key, sizeof k.key, "%s", key);
    const authkeys_entry *e = bsearch(&k, a->v, a->n, sizeof *a->v, s_cmp);
    return e ? &e->id : NULL;
}
