/*  ident.c - roles and what they allow (see ident.h). */
#include "ident.h"

#include "util.h"

#include <sodium.h>
#include <string.h>

static const char *const s_names[] = {
    [IDENT_NONE] = "none",     [IDENT_ADMIN] = "admin",           [IDENT_USER] = "user",
    [IDENT_VIEWER] = "viewer", [IDENT_DISPATCHER] = "dispatcher",
};

const char *ident_role_str(ident_role r)
{
    return (unsigned)r < sizeof s_names / sizeof s_names[0] ? s_names[r] : "none";
}

int ident_role_parse(const char *text, ident_role *out)
{
    int r = util_name_index(s_names, IDENT_DISPATCHER + 1, text);
    if (r <= IDENT_NONE) /* "none" is no role one can name */
        return -1;
    *out = (ident_role)r;
    return 0;
}

int ident_valid_user(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || strchr("_.@-", ch)))
            return 0;
    }
    return 1;
}

int ident_allows(ident_role r, ident_action a)
{
    switch (r) {
    case IDENT_ADMIN:
        return a != IDENT_RUN;
    case IDENT_USER:
        return a == IDENT_READ || a == IDENT_SUBMIT || a == IDENT_STEER;
    case IDENT_VIEWER:
        return a == IDENT_READ;
    case IDENT_DISPATCHER:
        return a == IDENT_READ || a == IDENT_RUN;
    case IDENT_NONE:
        break;
    }
    return 0;
}

int ident_token_new(char out[IDENT_TOKEN_LEN + 1])
{
    if (sodium_init() < 0)
        return -1;
    unsigned char raw[32];
    randombytes_buf(raw, sizeof raw);
    memcpy(out, "jzt_", 4);
    sodium_bin2hex(out + 4, IDENT_TOKEN_LEN - 4 + 1, raw, sizeof raw);
    sodium_memzero(raw, sizeof raw);
    return 0;
}

void ident_token_hash(const char *token, char out[IDENT_HASH_LEN + 1])
{
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, (const unsigned char *)token, strlen(token));
    sodium_bin2hex(out, IDENT_HASH_LEN + 1, h, sizeof h);
}

void ident_attempt_tag(const char *token, char out[IDENT_TAG_LEN + 1])
{
    char h[IDENT_HASH_LEN + 1];
    ident_token_hash(token, h);
    memcpy(out, h, IDENT_TAG_LEN);
    out[IDENT_TAG_LEN] = 0;
}

int ident_token_wellformed(const char *text)
{
    if (!text || strlen(text) != IDENT_TOKEN_LEN || strncmp(text, "jzt_", 4))
        return 0;
    for (const char *p = text + 4; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}
