/*  test_authkeys.c - the authorized-keys parser (common/authkeys.c) and
    key files (common/keys.c): good files with comments and blank lines,
    every kind of bad line named by its number, duplicates, lookups, a
    large file parsed in n log n, key pairs written 0600 and read back, a
    file others may write refused.
*/
#include "jz_test.h"
#include "common/authkeys.h"
#include "common/keys.h"

#include <sys/stat.h>
#include <unistd.h>

static keys_pair s_pair(void)
{
    keys_pair kp;
    if (keys_generate(&kp) != 0)
        memset(&kp, 0, sizeof kp);
    return kp;
}

TEST(parses_entries_comments_and_blank_lines)
{
    keys_pair a = s_pair(), b = s_pair();
    REQUIRE(keys_valid_z85(a.pub) && keys_valid_z85(b.pub));
    char text[512], err[256] = "";
    snprintf(text, sizeof text,
             "# who may talk to the controller\n\n  %s alice admin\n%s\tbot.1 dispatcher",
             a.pub, b.pub);
    authkeys_t k;
    authkeys_init(&k);
    REQUIRE(authkeys_parse(text, &k, err, sizeof err) == 0);
    CHECK(k.n == 2);
    const ident_t *ia = authkeys_find(&k, a.pub), *ib = authkeys_find(&k, b.pub);
    REQUIRE(ia && ib);
    CHECK(!strcmp(ia->user, "alice") && ia->role == IDENT_ADMIN);
    CHECK(!strcmp(ib->user, "bot.1") && ib->role == IDENT_DISPATCHER);
    keys_pair c = s_pair();
    CHECK(authkeys_find(&k, c.pub) == NULL);
    CHECK(authkeys_find(&k, "") == NULL);
    authkeys_fini(&k);
    CHECK(k.n == 0 && k.v == NULL);
}

/* Parses text and checks the error names `want`; the old table stays. */
static void s_bad(const char *text, const char *want)
{
    authkeys_t k;
    authkeys_init(&k);
    char err[256] = "";
    keys_pair keep = s_pair();
    char good[128];
    snprintf(good, sizeof good, "%s keep user\n", keep.pub);
    REQUIRE(authkeys_parse(good, &k, err, sizeof err) == 0);
    CHECK(authkeys_parse(text, &k, err, sizeof err) == -1);
    if (!strstr(err, want))
        JZT_FAIL("error \"%s\" does not say \"%s\"", err, want);
    CHECK(k.n == 1 && authkeys_find(&k, keep.pub) != NULL);
    authkeys_fini(&k);
}

TEST(bad_lines_are_named_with_their_number)
{
    keys_pair a = s_pair(), b = s_pair();
    char t[512];
    s_bad("# only a comment\nshort bob user\n", "line 2: \"short\" is not a public key");
    snprintf(t, sizeof t, "%s\n", a.pub);
    s_bad(t, "line 1: expected \"<z85 public key> <user> <role>\"");
    snprintf(t, sizeof t, "%s bob\n", a.pub);
    s_bad(t, "line 1: expected");
    snprintf(t, sizeof t, "\n\n%s bob root\n", a.pub);
    s_bad(t, "line 3: unknown role \"root\"");
    snprintf(t, sizeof t, "%s bob user extra\n", a.pub);
    s_bad(t, "line 1: more than three fields");
    snprintf(t, sizeof t, "%s b/ob user\n", a.pub);
    s_bad(t, "line 1: user \"b/ob\"");
    snprintf(t, sizeof t, "%s bob user\n%s eve user\n%s bob2 viewer\n", a.pub, b.pub,
             a.pub);
    s_bad(t, "line 3: the key of line 1 again");
    /* 40 characters that are not Z85 */
    s_bad("0123456789012345678901234567890123456\"\"\" bob user\n",
          "is not a public key");
}

TEST(large_file_parses)
{
    size_t n = 5000;
    char *text = malloc(n * 64);
    REQUIRE(text);
    size_t off = 0;
    keys_pair last;
    for (size_t i = 0; i < n; i++) {
        last = s_pair();
        off += (size_t)sprintf(text + off, "%s u%zu user\n", last.pub, i);
    }
    authkeys_t k;
    authkeys_init(&k);
    char err[256] = "";
    CHECK(authkeys_parse(text, &k, err, sizeof err) == 0);
    CHECK(k.n == n);
    const ident_t *id = authkeys_find(&k, last.pub);
    CHECK(id && !strcmp(id->user, "u4999"));
    authkeys_fini(&k);
    free(text);
}

TEST(key_files_round_trip_private)
{
    char dir[] = "/tmp/jz-keys-XXXXXX";
    REQUIRE(mkdtemp(dir));
    char sub[128], path[256], err[512] = "";
    snprintf(sub, sizeof sub, "%s/home", dir);
    keys_pair kp = s_pair(), back;
    REQUIRE(keys_write(sub, "me", &kp, 0, err, sizeof err) == 0);
    struct stat st;
    CHECK(stat(sub, &st) == 0 && (st.st_mode & 0777) == 0700);
    snprintf(path, sizeof path, "%s/me.key", sub);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    REQUIRE(keys_read_pair(path, &back, err, sizeof err) == 0);
    CHECK(!strcmp(back.pub, kp.pub) && !strcmp(back.sec, kp.sec));
    /* not replaced without force */
    keys_pair other = s_pair();
    CHECK(keys_write(sub, "me", &other, 0, err, sizeof err) == -1);
    CHECK(strstr(err, "--force") != NULL);
    /* the public key from the .pub, the .key and the text itself */
    char pub[KEYS_Z85_LEN + 1];
    CHECK(keys_read_public(path, pub, err, sizeof err) == 0 && !strcmp(pub, kp.pub));
    snprintf(path, sizeof path, "%s/me.pub", sub);
    CHECK(keys_read_public(path, pub, err, sizeof err) == 0 && !strcmp(pub, kp.pub));
    CHECK(keys_read_public(kp.pub, pub, err, sizeof err) == 0 && !strcmp(pub, kp.pub));
    CHECK(keys_read_public("/nonexistent/x.pub", pub, err, sizeof err) == -1);
    /* a secret readable by others is refused */
    snprintf(path, sizeof path, "%s/me.key", sub);
    chmod(path, 0644);
    CHECK(keys_read_pair(path, &back, err, sizeof err) == -1 && strstr(err, "chmod 600"));
    unlink(path);
    snprintf(path, sizeof path, "%s/me.pub", sub);
    unlink(path);
    rmdir(sub);
    rmdir(dir);
}

/* As ssh's StrictModes: a file group or others may write is refused on
   load, naming the file and the mode; 0644 and 0600 are read. */
TEST(writable_files_are_refused)
{
    char path[] = "/tmp/jz-authkeys-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    keys_pair a = s_pair();
    char line[128], err[512] = "";
    int n = snprintf(line, sizeof line, "%s alice admin\n", a.pub);
    REQUIRE(write(fd, line, (size_t)n) == n);
    close(fd);
    static const mode_t bad[] = {0666, 0620, 0602};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        chmod(path, bad[i]);
        authkeys_t k;
        authkeys_init(&k);
        CHECK(authkeys_load(path, &k, err, sizeof err) == -1);
        CHECK(strstr(err, path) && strstr(err, "writable by no one else") &&
              strstr(err, "chmod 600"));
        CHECK(k.n == 0);
        authkeys_fini(&k);
    }
    static const mode_t good[] = {0644, 0600};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        chmod(path, good[i]);
        authkeys_t k;
        authkeys_init(&k);
        CHECK(authkeys_load(path, &k, err, sizeof err) == 0 && k.n == 1);
        authkeys_fini(&k);
    }
    unlink(path);
}

int main(void)
{
    RUN(parses_entries_comments_and_blank_lines);
    RUN(bad_lines_are_named_with_their_number);
    RUN(large_file_parses);
    RUN(key_files_round_trip_private);
    RUN(writable_files_are_refused);
    TEST_DONE();
}
