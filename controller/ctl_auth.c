/*  ctl_auth.c - who is speaking to the controller: transport security,
    the ZAP handler, the authorized keys, and the identity of each message.

    Transports and identities (docs/design.md, "Authentication"):
    - ipc:// (the default: a socket in a private 0700 directory): the
      kernel tells the peer's uid (SO_PEERCRED, which libzmq passes as the
      message's Peer-Address "...:uid:gid:pid"). The controller's own uid
      is its admin and may do everything, dispatcher work included (that
      is how `jizhi run` and a local dispatcher work); any other uid is a
      `user` named after its login name.
    - tcp:// with CURVE (required unless --insecure): every connection
      does the CURVE handshake with the controller's key pair. The ZAP
      handler here (inproc://zeromq.zap.01, polled in the controller's
      loop) accepts every valid handshake and sets the connection's
      User-Id to the client's public key; each message is then looked up
      in the authorized keys as they are *now* (so a key removed by a
      SIGHUP reload loses its rights at once). A key not listed is
      anonymous: it may only speak as a trial with that trial's token.
    - tcp:// with --insecure: plain TCP, every peer is the controller's
      admin (trusted network only); a warning at every start.
*/
#include "ctl.h"
#include "ctl_internal.h"

#include "../common/log.h"
#include "../common/util.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"

/* The login name of uid into out (or "uid<N>"). */
static void s_login(uid_t uid, char *out, size_t size)
{
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res &&
        ident_valid_user(res->pw_name))
        snprintf(out, size, "%s", res->pw_name);
    else
        snprintf(out, size, "uid%lu", (unsigned long)uid);
}

int ctl_default_bind(const char *db_path, char *out, size_t size, char *err,
                     size_t errsize)
{
    char dir[1024];
    const char *xdg = getenv("XDG_RUNTIME_DIR"), *home = getenv("JIZHI_HOME");
    if (xdg && *xdg)
        snprintf(dir, sizeof dir, "%s/jizhi", xdg);
    else if (home && *home)
        snprintf(dir, sizeof dir, "%s/run", home);
    else
        snprintf(dir, sizeof dir, "/tmp/jizhi-%lu", (unsigned long)geteuid());
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        if (errno == ENOENT && util_mkdirs(dir, 0700) == 0) {
            /* created with its parents */
        } else {
            snprintf(err, errsize, "cannot create the socket directory %s: %s", dir,
                     strerror(errno));
            return -1;
        }
    }
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 077)) {
        snprintf(err, errsize,
                 "the socket directory %s must be a directory owned by this user with "
                 "mode 0700 (it is not; remove it or pass --bind)",
                 dir);
        return -1;
    }
    /* one socket per database: a hash of its absolute path */
    char *abs = realpath(db_path, NULL);
    const char *key = abs ? abs : db_path;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = key; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    free(abs);
    int n = snprintf(out, size, "ipc://%s/ctl-%016llx.sock", dir, (unsigned long long)h);
    if (n < 0 || (size_t)n >= size || strlen(out) - 6 >= 108) {
        snprintf(err, errsize, "the socket path under %s is too long for ipc://", dir);
        return -1;
    }
    return 0;
}

/* The key directory's file `name`, into out; "" when there is none. */
static void s_keydir_file(const char *name, char *out, size_t size)
{
    char dir[900];
    out[0] = 0;
    if (keys_dir(dir, sizeof dir) == 0)
        snprintf(out, size, "%s/%s", dir, name);
}

int ctl__auth_setup(ctl_t *c, const char *bind, int insecure, const char *key_path,
                    const char *authorized_keys, char *err, size_t errsize)
{
    authkeys_init(&c->keys);
    c->self.role = IDENT_ADMIN;
    s_login(geteuid(), c->self.user, sizeof c->self.user);
    if (!strncmp(bind, "ipc://", 6)) {
        c->transport = CTL_TR_IPC;
        return 0;
    }
    if (strncmp(bind, "tcp://", 6) != 0) {
        c->transport = CTL_TR_TRUSTED; /* inproc:// inside one process */
        return 0;
    }
    if (insecure) {
        c->transport = CTL_TR_TRUSTED;
        const char *w = "WARNING: --insecure: plain TCP without authentication or "
                        "encryption; anyone who reaches %s is the admin (trusted "
                        "networks only)";
        fprintf(stderr, "jizhi controller: ");
        fprintf(stderr, w, bind);
        fputc('\n', stderr);
        log_warn("ctl", w, bind);
        return 0;
    }
    c->transport = CTL_TR_CURVE;
    if (!zmq_has("curve")) {
        snprintf(err, errsize,
                 "tcp:// needs CURVE and this libzmq has none; bind ipc:// "
                 "or pass --insecure on a trusted network");
        return -1;
    }
    char path[1024];
    if (key_path)
        snprintf(path, sizeof path, "%s", key_path);
    else
        s_keydir_file("controller.key", path, sizeof path);
    keys_pair kp;
    char why[1200];
    if (!path[0] || access(path, F_OK) != 0) {
        snprintf(err, errsize,
                 "%s needs a server key for CURVE: no %s (make one with `jizhi keygen "
                 "--name controller`, or pass --key FILE; --insecure allows plain TCP "
                 "on a trusted network)",
                 bind, path[0] ? path : "key directory ($JIZHI_HOME or $HOME unset)");
        return -1;
    }
    if (keys_read_pair(path, &kp, why, sizeof why) != 0) {
        snprintf(err, errsize, "--key: %s", why);
        return -1;
    }
    if (authorized_keys)
        snprintf(c->keys_path, sizeof c->keys_path, "%s", authorized_keys);
    else
        s_keydir_file("authorized_keys", c->keys_path, sizeof c->keys_path);
    if (authorized_keys || access(c->keys_path, F_OK) == 0) {
        if (authkeys_load(c->keys_path, &c->keys, why, sizeof why) != 0) {
            snprintf(err, errsize, "--authorized-keys: %s", why);
            return -1;
        }
    } else {
        log_warn("ctl",
                 "no authorized keys yet (%s): only trials can talk to the controller "
                 "until it exists and SIGHUP rereads it",
                 c->keys_path[0] ? c->keys_path : "no key directory");
    }
    c->zap = zmq_socket(c->zctx, ZMQ_REP);
    int linger = 0, on = 1;
    zmq_setsockopt(c->zap, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(c->zap, ZAP_ENDPOINT) != 0) {
        snprintf(err, errsize, "cannot bind the ZAP handler: %s", zmq_strerror(errno));
        return -1;
    }
    if (zmq_setsockopt(c->router, ZMQ_CURVE_SERVER, &on, sizeof on) != 0 ||
        zmq_setsockopt(c->router, ZMQ_CURVE_SECRETKEY, kp.sec, KEYS_Z85_LEN + 1) != 0 ||
        zmq_setsockopt(c->router, ZMQ_ZAP_DOMAIN, "jizhi", 5) != 0) {
        snprintf(err, errsize, "cannot set up CURVE: %s", zmq_strerror(errno));
        return -1;
    }
    log_info("ctl", "CURVE on %s, server key %s, %zu authorized keys", bind, kp.pub,
             c->keys.n);
    return 0;
}

/* Receives one frame of a ZAP request into buf (NUL-terminated); its
   size, or -1. */
static int s_zap_frame(void *sock, unsigned char *buf, size_t size, int *more)
{
    int n = zmq_recv(sock, buf, size - 1, ZMQ_DONTWAIT);
    if (n < 0)
        return -1;
    if ((size_t)n > size - 1)
        n = (int)size - 1;
    buf[n] = 0;
    size_t sz = sizeof *more;
    zmq_getsockopt(sock, ZMQ_RCVMORE, more, &sz);
    return n;
}

/* Answers pending ZAP requests: every well-formed CURVE handshake is
   accepted, with the client's public key (Z85) as its User-Id. */
static void s_zap_answer(ctl_t *c)
{
    for (;;) {
        unsigned char f[8][256];
        int len[8], more = 1, n = 0;
        while (more) {
            int r = s_zap_frame(c->zap, f[n < 7 ? n : 7], sizeof f[0], &more);
            if (r < 0) {
                if (n == 0)
                    return; /* nothing pending */
                more = 0;
                break;
            }
            if (n < 8)
                len[n] = r;
            n++;
        }
        /* version, request id, domain, address, routing id, mechanism,
           credentials... */
        const char *status = "400", *text = "malformed ZAP request";
        char user[KEYS_Z85_LEN + 1] = "";
        if (n >= 6 && !strcmp((char *)f[0], "1.0")) {
            if (!strcmp((char *)f[5], "CURVE") && n == 7 && len[6] == 32) {
                zmq_z85_encode(user, f[6], 32);
                status = "200";
                text = "OK";
            } else {
                text = "CURVE only";
            }
        }
        zmq_send(c->zap, "1.0", 3, ZMQ_SNDMORE);
        zmq_send(c->zap, f[1], n > 1 ? (size_t)len[1] : 0, ZMQ_SNDMORE);
        zmq_send(c->zap, status, 3, ZMQ_SNDMORE);
        zmq_send(c->zap, text, strlen(text), ZMQ_SNDMORE);
        zmq_send(c->zap, user, strlen(user), ZMQ_SNDMORE);
        zmq_send(c->zap, "", 0, 0);
    }
}

void ctl_reload_keys(ctl_t *c)
{
    c->reload = 1;
}

/* Rereads the authorized keys; a bad file keeps the old table. */
static void s_reload(ctl_t *c)
{
    c->reload = 0;
    if (c->transport != CTL_TR_CURVE)
        return;
    if (!c->keys_path[0]) {
        log_warn("ctl", "SIGHUP: no authorized-keys file to reload (start with "
                        "--authorized-keys FILE)");
        return;
    }
    authkeys_t fresh;
    authkeys_init(&fresh);
    char why[1200];
    if (authkeys_load(c->keys_path, &fresh, why, sizeof why) != 0) {
        log_error("ctl", "SIGHUP: kept the %zu authorized keys in use: %s", c->keys.n,
                  why);
        return;
    }
    authkeys_fini(&c->keys);
    c->keys = fresh;
    log_info("ctl", "SIGHUP: reloaded %s: %zu authorized keys", c->keys_path, c->keys.n);
}

void ctl__auth_poll(ctl_t *c)
{
    if (c->reload)
        s_reload(c);
    if (c->zap)
        s_zap_answer(c);
}

void *ctl__auth_socket(const ctl_t *c)
{
    return c->zap;
}

void ctl__auth_identify(const ctl_t *c, const wire_meta *m, ctl_ident *out)
{
    memset(out, 0, sizeof *out);
    switch (c->transport) {
    case CTL_TR_TRUSTED:
        out->id = c->self;
        out->trusted = 1;
        snprintf(out->principal, sizeof out->principal, "trusted");
        return;
    case CTL_TR_CURVE: {
        const ident_t *id = authkeys_find(&c->keys, m->user_id);
        if (id)
            out->id = *id;
        snprintf(out->principal, sizeof out->principal, "key:%s", m->user_id);
        return;
    }
    case CTL_TR_IPC: {
        /* "...:uid:gid:pid": the uid is the third field from the end */
        const char *p = m->peer_addr + strlen(m->peer_addr);
        int colons = 0;
        while (p > m->peer_addr && colons < 3)
            if (*--p == ':')
                colons++;
        char *end;
        unsigned long uid = colons == 3 ? strtoul(p + 1, &end, 10) : 0;
        if (colons != 3 || *end != ':')
            return; /* unknown: anonymous */
        snprintf(out->principal, sizeof out->principal, "uid:%lu", uid);
        if ((uid_t)uid == geteuid()) {
            out->id = c->self;
            out->trusted = 1;
        } else {
            out->id.role = IDENT_USER;
            s_login((uid_t)uid, out->id.user, sizeof out->id.user);
        }
        return;
    }
    }
}

void ctl__auth_fini(ctl_t *c)
{
    if (c->zap)
        zmq_close(c->zap);
    c->zap = NULL;
    authkeys_fini(&c->keys);
}

/* ---- permissions beyond the role: delegation, owners, dispatcher names ---- */

void ctl__auth_effective(const json_t *msg, const ctl_ident *who, ctl_ident *out)
{
    *out = *who;
    if (!who->trusted && who->id.role != IDENT_ADMIN)
        return;
    /* a front end the controller trusts (the web server, as the
       controller's own user or an admin key) acts for its token's user */
    const char *w = json_string_value(json_object_get(msg, "who"));
    const char *role = json_string_value(json_object_get(msg, "as_role"));
    ident_role r;
    if (!w || strncmp(w, "web:", 4) || !ident_valid_user(w + 4) || !role ||
        ident_role_parse(role, &r) != 0)
        return;
    /* a web token is an admin's, a user's or a viewer's: delegation never
       grants a dispatcher's work (the sender keeps its own identity, and an
       admin's may not run trials) */
    if (r != IDENT_ADMIN && r != IDENT_USER && r != IDENT_VIEWER)
        return;
    snprintf(out->id.user, sizeof out->id.user, "%s", w + 4);
    out->id.role = r;
    out->trusted = 0;
}

const char *ctl__auth_owner(const ctl_t *c, const ctl_study *s)
{
    return s->spec->owner ? s->spec->owner : c->self.user;
}

int ctl__auth_may_steer(const ctl_t *c, const ctl_ident *who, const ctl_study *s)
{
    if (who->trusted || who->id.role == IDENT_ADMIN)
        return 1;
    return who->id.role == IDENT_USER && !strcmp(ctl__auth_owner(c, s), who->id.user);
}

int ctl__auth_submit_owner(const ctl_t *c, const ctl_ident *who, json_t *spec, char *err,
                           size_t errsize)
{
    if (who->trusted)
        return 0; /* the controller's own user: the spec's owner, else its own */
    const char *given = json_string_value(json_object_get(spec, "owner"));
    if (given && strcmp(given, who->id.user) != 0 && who->id.role != IDENT_ADMIN) {
        snprintf(err, errsize, "owner: %s may not submit a study owned by \"%.64s\"",
                 who->id.user, given);
        return -1;
    }
    /* an alert hook runs as the controller's user on its host: only an
       admin may ask for one (a user's alerts notify, they never run code) */
    json_t *alerts = json_object_get(spec, "alerts"), *rule;
    size_t i;
    if (who->id.role != IDENT_ADMIN && json_is_array(alerts))
        json_array_foreach(alerts, i, rule)
        {
            if (json_is_object(rule) && json_object_get(rule, "hook")) {
                snprintf(err, errsize,
                         "alerts[%zu].hook: %s (role %s) may not submit an alert hook: "
                         "hooks run programs as the controller's user, so they come only "
                         "from an admin (the controller's --alerts FILE or an admin's "
                         "submit); drop the hook and the alert still fires (events, "
                         "`jizhi alerts`)",
                         i, who->id.user, ident_role_str(who->id.role));
                return -1;
            }
        }
    if (!given)
        json_object_set_new(spec, "owner", json_string(who->id.user));
    return 0;
}
