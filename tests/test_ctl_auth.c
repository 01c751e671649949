/*  test_ctl_auth.c - the controller's CURVE identities at the message
    level: a dispatcher's name belongs to the key that registered it, so
    another dispatcher key can neither heartbeat, start nor report exits
    under it, and a key without the dispatcher role can send no dispatcher
    message at all. A real controller on tcp://127.0.0.1 with CURVE, keys
    made here, requests through the same client code as the CLI. */
#include "jz_test.h"

#include "common/client.h"
#include "common/keys.h"
#include "controller/ctl.h"
#include "common/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char s_dir[64];

static void *s_loop(void *arg)
{
    struct {
        ctl_t *c;
        atomic_int *stop;
    } *a = arg;
    ctl_run(a->c, a->stop);
    return NULL;
}

/* Writes DIR/name.key and .pub; the public key into pub. */
static void s_key(const char *name, char pub[KEYS_Z85_LEN + 1])
{
    keys_pair kp;
    char err[256];
    REQUIRE(keys_generate(&kp) == 0);
    REQUIRE(keys_write(s_dir, name, &kp, 0, err, sizeof err) == 0);
    memcpy(pub, kp.pub, KEYS_Z85_LEN + 1);
}

/* Sends msg with DIR/<as>.key; returns the reply's code ("" for ok). */
static const char *s_call(const char *ep, const char *as, json_t *msg)
{
    static char code[64];
    char key[128], err[256];
    snprintf(key, sizeof key, "%s/%s.key", s_dir, as);
    setenv("JIZHI_KEY", key, 1);
    json_t *r = client_call(ep, msg, 10000, err, sizeof err);
    if (!r) {
        snprintf(code, sizeof code, "no reply: %.40s", err);
        return code;
    }
    const char *c = json_string_value(json_object_get(r, "code"));
    snprintf(code, sizeof code, "%s", c ? c : "");
    json_decref(r);
    return code;
}

static json_t *s_register(const char *name)
{
    return json_pack("{s:s, s:s, s:i, s:[], s:[]}", "type", "register", "name", name,
                     "slots", 1, "gpus", "running");
}

TEST(a_dispatcher_name_belongs_to_its_key)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/jz-ctlauth-XXXXXX");
    REQUIRE(mkdtemp(s_dir) != NULL);
    setenv("JIZHI_HOME", s_dir, 1);
    char ctl_pub[KEYS_Z85_LEN + 1], d1[KEYS_Z85_LEN + 1], d2[KEYS_Z85_LEN + 1],
        u[KEYS_Z85_LEN + 1];
    s_key("controller", ctl_pub);
    s_key("d1", d1);
    s_key("d2", d2);
    s_key("u", u);
    char db[128], auth[128], key[128];
    snprintf(db, sizeof db, "%s/a.db", s_dir);
    snprintf(auth, sizeof auth, "%s/authorized_keys", s_dir);
    snprintf(key, sizeof key, "%s/controller.key", s_dir);
    FILE *f = fopen(auth, "w");
    REQUIRE(f != NULL);
    fprintf(f, "%s m1 dispatcher\n%s m2 dispatcher\n%s uma user\n", d1, d2, u);
    fclose(f);
    setenv("JIZHI_SERVER_KEY", ctl_pub, 1);

    ctl_config cfg = {.db_path = db,
                      .bind = "tcp://127.0.0.1:*",
                      .key_path = key,
                      .authorized_keys = auth};
    char err[256];
    ctl_t *c = ctl_new(&cfg, err, sizeof err);
    REQUIRE(c != NULL);
    const char *ep = ctl_endpoint(c);
    REQUIRE(!strncmp(ep, "tcp://127.0.0.1:", 16));
    atomic_int stop = 0;
    struct {
        ctl_t *c;
        atomic_int *stop;
    } arg = {c, &stop};
    pthread_t th;
    pthread_create(&th, NULL, s_loop, &arg);

    /* d1 registers m1; d2 registers its own m2 */
    CHECK_STR(s_call(ep, "d1", s_register("m1")), "");
    CHECK_STR(s_call(ep, "d2", s_register("m2")), "");
    /* d2 under m1's name: every dispatcher message is refused */
    CHECK_STR(s_call(ep, "d2", s_register("m1")), "forbidden");
    CHECK_STR(s_call(ep, "d2",
                     json_pack("{s:s, s:s, s:[]}", "type", "disp_heartbeat", "name", "m1",
                               "running")),
              "forbidden");
    CHECK_STR(s_call(ep, "d2",
                     json_pack("{s:s, s:s, s:i, s:i, s:i}", "type", "started", "name",
                               "m1", "trial", 1, "attempt", 0, "pid", 1234)),
              "forbidden");
    CHECK_STR(
        s_call(ep, "d2",
               json_pack("{s:s, s:s, s:i, s:i, s:s, s:i}", "type", "exited", "name", "m1",
                         "trial", 1, "attempt", 0, "how", "exited", "code", 0)),
        "forbidden");
    /* a user key sends no dispatcher message at all, even for a new name */
    const char *code = s_call(ep, "u", s_register("m3"));
    CHECK(!strcmp(code, "forbidden") || !strcmp(code, "unauthorized"));
    code = s_call(ep, "u",
                  json_pack("{s:s, s:s, s:i, s:i, s:s, s:i}", "type", "exited", "name",
                            "m1", "trial", 1, "attempt", 0, "how", "exited", "code", 0));
    CHECK(!strcmp(code, "forbidden") || !strcmp(code, "unauthorized"));
    /* m1's own key still speaks for it */
    CHECK_STR(s_call(ep, "d1",
                     json_pack("{s:s, s:s, s:[]}", "type", "disp_heartbeat", "name", "m1",
                               "running")),
              "");

    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    ctl_destroy(&c);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    log_set_level(LOGL_ERROR); /* every refusal is a warning line */
    RUN(a_dispatcher_name_belongs_to_its_key);
    TEST_DONE();
}
