/*  keys.c - CURVE key pairs on disk (see keys.h). */
#include "keys.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

int keys_valid_z85(const char *s)
{
    if (!s || strlen(s) != KEYS_Z85_LEN)
        return 0;
    uint8_t raw[32];
    return zmq_z85_decode(raw, s) != NULL;
}

int keys_dir(char *out, size_t size)
{
    const char *home = getenv("JIZHI_HOME");
    int n;
    if (home && *home) {
        n = snprintf(out, size, "%s", home);
    } else {
        home = getenv("HOME");
        if (!home || !*home)
            return -1;
        n = snprintf(out, size, "%s/.config/jizhi", home);
    }
    return (n < 0 || (size_t)n >= size) ? -1 : 0;
}

int keys_generate(keys_pair *kp)
{
    if (!zmq_has("curve"))
        return -1;
    return zmq_curve_keypair(kp->pub, kp->sec) == 0 ? 0 : -1;
}

/* Writes `text` to a new file at path (mode 0600), replacing it when it
   exists and `replace`. 0 or -1 with err. */
static int s_write_file(const char *path, const char *text, int replace, char *err,
                        size_t errsize)
{
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (replace ? O_TRUNC : O_EXCL);
    int fd = open(path, flags, 0600);
    if (fd < 0) {
        snprintf(err, errsize, "%s: %s%s", path, strerror(errno),
                 errno == EEXIST ? " (use --force to replace it)" : "");
        return -1;
    }
    size_t len = strlen(text);
    int ok = fchmod(fd, 0600) == 0 && write(fd, text, len) == (ssize_t)len;
    if (close(fd) != 0)
        ok = 0;
    if (!ok) {
        snprintf(err, errsize, "%s: cannot write: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int keys_write(const char *dir, const char *name, const keys_pair *kp, int force,
               char *err, size_t errsize)
{
    if (util_mkdirs(dir, 0700) != 0) {
        snprintf(err, errsize, "%s: cannot create the key directory: %s", dir,
                 strerror(errno));
        return -1;
    }
    char key[4096], pub[4096], text[128];
    if (snprintf(key, sizeof key, "%s/%s.key", dir, name) >= (int)sizeof key ||
        snprintf(pub, sizeof pub, "%s/%s.pub", dir, name) >= (int)sizeof pub) {
        snprintf(err, errsize, "%s: path too long", dir);
        return -1;
    }
    snprintf(text, sizeof text, "public %s\nsecret %s\n", kp->pub, kp->sec);
    if (s_write_file(key, text, force, err, errsize) != 0)
        return -1;
    snprintf(text, sizeof text, "%s\n", kp->pub);
    return s_write_file(pub, text, 1, err, errsize);
}

/* Reads up to size-1 bytes of a small file. 0 or -1 with err. */
static int s_read_small(const char *path, char *buf, size_t size, char *err,
                        size_t errsize)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errsize, "%s: %s", path, strerror(errno));
        return -1;
    }
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = 0;
    fclose(f);
    return 0;
}

/* The value after "<word> " on a line of text, 40 characters, into out. */
static int s_field(const char *text, const char *word, char out[KEYS_Z85_LEN + 1])
{
    size_t wl = strlen(word);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, word, wl) == 0 && p[wl] == ' ') {
            const char *v = p + wl + 1;
            size_t n = strcspn(v, " \t\r\n");
            if (n != KEYS_Z85_LEN)
                return -1;
            memcpy(out, v, n);
            out[n] = 0;
            return keys_valid_z85(out) ? 0 : -1;
        }
    }
    return -1;
}

int keys_read_pair(const char *path, keys_pair *kp, char *err, size_t errsize)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errsize, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (st.st_mode & 077) {
        snprintf(err, errsize,
                 "%s: a secret key must be readable by its owner only (chmod 600)", path);
        return -1;
    }
    char text[512];
    if (s_read_small(path, text, sizeof text, err, errsize) != 0)
        return -1;
    if (s_field(text, "public", kp->pub) != 0 || s_field(text, "secret", kp->sec) != 0) {
        snprintf(err, errsize,
                 "%s: not a key pair (expected lines \"public <40 z85 chars>\" and "
                 "\"secret <40 z85 chars>\", as `jizhi keygen` writes)",
                 path);
        return -1;
    }
    return 0;
}

int keys_read_public(const char *text, char out[KEYS_Z85_LEN + 1], char *err,
                     size_t errsize)
{
    if (keys_valid_z85(text)) {
        memcpy(out, text, KEYS_Z85_LEN + 1);
        return 0;
    }
    char buf[512];
    if (s_read_small(text, buf, sizeof buf, err, errsize) != 0) {
        snprintf(err, errsize,
                 "%.200s: not a public key (40 z85 characters) nor a file that holds "
                 "one (%s)",
                 text, strerror(errno));
        return -1;
    }
    if (s_field(buf, "public", out) == 0)
        return 0;
    size_t n = strcspn(buf, " \t\r\n");
    if (n == KEYS_Z85_LEN) {
        memcpy(out, buf, n);
        out[n] = 0;
        if (keys_valid_z85(out))
            return 0;
    }
    snprintf(err, errsize, "%s: not a public key (40 z85 characters)", text);
    return -1;
}

/* The refusal of a tcp:// endpoint without a server key: what to do. */
static void s_no_key(const char *endpoint, int have_dir, const char *dir, char *err,
                     size_t errsize)
{
    char here[3200];
    if (have_dir)
        snprintf(here, sizeof here, " (copy that file to %s/controller.pub here)", dir);
    else
        here[0] = 0;
    snprintf(err, errsize,
             "%s: no server key (CURVE over tcp://): pass --server-key KEY|FILE or set "
             "JIZHI_SERVER_KEY to the controller's public key, or --insecure "
             "(JIZHI_SERVER_KEY=none) for plain TCP to a controller started with "
             "--insecure, on a trusted network only. `jizhi keygen --name controller` "
             "printed the key on the controller's host, where it is "
             "KEYDIR/controller.pub%s; without it anyone on the network could pose as "
             "the controller",
             endpoint, here);
}

int keys_client_server_key(const char *endpoint, char server_pub[KEYS_Z85_LEN + 1],
                           char *err, size_t errsize)
{
    server_pub[0] = 0;
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return 0;
    char dir[3072], path[4096];
    int have_dir = keys_dir(dir, sizeof dir) == 0;
    const char *sk = getenv("JIZHI_SERVER_KEY");
    if (sk && *sk) {
        if (!strcmp(sk, "none"))
            return 0;
        if (keys_read_public(sk, server_pub, err, errsize) != 0) {
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            const char *from = getenv("JIZHI_SERVER_KEY_FROM"); /* keys.h */
            snprintf(err, errsize, "%s: %s", from && *from ? from : "JIZHI_SERVER_KEY",
                     why);
            server_pub[0] = 0;
            return -1;
        }
        return 0;
    }
    if (have_dir &&
        snprintf(path, sizeof path, "%s/controller.pub", dir) < (int)sizeof path &&
        access(path, F_OK) == 0) {
        if (keys_read_public(path, server_pub, err, errsize) != 0) {
            server_pub[0] = 0;
            return -1;
        }
        return 0;
    }
    s_no_key(endpoint, have_dir, dir, err, errsize);
    return -1;
}

const char *keys_client_key_path(char *path, size_t size)
{
    char dir[3072];
    const char *ck = getenv("JIZHI_KEY");
    *path = 0;
    if (ck && *ck && strcmp(ck, "anonymous") != 0)
        snprintf(path, size, "%s", ck);
    else if (!ck && keys_dir(dir, sizeof dir) == 0 &&
             snprintf(path, size, "%s/client.key", dir) < (int)size &&
             access(path, F_OK) != 0)
        *path = 0;
    return path;
}

int keys_client_setup(void *sock, const char *endpoint, char *server_pub, char *err,
                      size_t errsize)
{
    if (server_pub)
        server_pub[0] = 0;
    char spub[KEYS_Z85_LEN + 1];
    if (keys_client_server_key(endpoint, spub, err, errsize) != 0)
        return -1;
    if (!spub[0])
        return 0; /* ipc://, inproc://, or plain TCP by choice */
    char path[4096];
    keys_pair kp;
    const char *ck = getenv("JIZHI_KEY");
    if (*keys_client_key_path(path, sizeof path)) {
        if (keys_read_pair(path, &kp, err, errsize) != 0) {
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            snprintf(err, errsize, "%s%s", ck && *ck ? "JIZHI_KEY: " : "", why);
            return -1;
        }
    } else if (keys_generate(&kp) != 0) {
        snprintf(err, errsize, "this libzmq has no CURVE support");
        return -1;
    }
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, spub, KEYS_Z85_LEN + 1) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, kp.pub, KEYS_Z85_LEN + 1) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, kp.sec, KEYS_Z85_LEN + 1) != 0) {
        snprintf(err, errsize, "cannot set CURVE keys: %s", zmq_strerror(errno));
        return -1;
    }
    if (server_pub)
        memcpy(server_pub, spub, KEYS_Z85_LEN + 1);
    return 0;
}
