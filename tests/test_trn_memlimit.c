/*  test_trn_memlimit.c - the memory limit the trainer holds its bf16 copy
    of the training set to (trainer/memlimit.h): the pick (each figure in
    turn the smallest) and the cgroup resolver for v1 and v2 against a fake
    cgroup tree in a temporary directory. Before (#38 review12 items 2, 3)
    only /sys/fs/cgroup/memory.max was read: never a v1 limit, never a v2
    limit below the root.
*/
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jz_test.h"
#include "trainer/memlimit.h"
#include "trainer/train_impl.h" /* trn__xh_limit */

static char s_root[PATH_MAX];

/* Writes text to s_root/rel, making the folders on the way. */
static void s_put(const char *rel, const char *text)
{
    char p[PATH_MAX + 256];
    snprintf(p, sizeof p, "%s/%s", s_root, rel);
    for (char *c = p + strlen(s_root) + 1; (c = strchr(c, '/')); c++) {
        *c = 0;
        mkdir(p, 0700);
        *c = '/';
    }
    FILE *f = fopen(p, "w");
    if (!f) {
        perror(p);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

static void s_rm_tree(void)
{
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s_root);
}

static void s_fresh_root(void)
{
    if (s_root[0])
        s_rm_tree();
    snprintf(s_root, sizeof s_root, "/tmp/jz_memlimit_XXXXXX");
    if (!mkdtemp(s_root)) {
        perror("mkdtemp");
        exit(1);
    }
}

TEST(pick_takes_the_smallest_known_figure)
{
    long cap = 1L << 40;
    CHECK(trn_memlimit_pick(1600, 3200, 4800, 16, cap) == 100);
    CHECK(trn_memlimit_pick(4800, 1600, 3200, 16, cap) == 100);
    CHECK(trn_memlimit_pick(3200, 4800, 1600, 16, cap) == 100);
    /* unknown figures (<= 0) are ignored */
    CHECK(trn_memlimit_pick(-1, 1600, -1, 16, cap) == 100);
    CHECK(trn_memlimit_pick(3200, 0, -1, 16, cap) == 200);
    CHECK(trn_memlimit_pick(-1, -1, -1, 16, cap) == cap);
    /* the cap wins when smaller */
    CHECK(trn_memlimit_pick(1600, 3200, 4800, 16, 50) == 50);
    CHECK(trn_memlimit_pick(1600, 3200, 4800, 1, cap) == 1600);
}

TEST(cgroup_v2_nested_takes_the_smallest_memory_max_up_to_the_root)
{
    s_fresh_root();
    /* a systemd scope or Slurm job: the limit on a parent, "max" below */
    s_put("user.slice/job.scope/memory.max", "max\n");
    s_put("user.slice/memory.max", "1048576000\n");
    CHECK(trn_memlimit_cgroup("0::/user.slice/job.scope\n", s_root) == 1048576000L);
    /* a smaller one deeper wins */
    s_put("user.slice/job.scope/memory.max", "524288000\n");
    CHECK(trn_memlimit_cgroup("0::/user.slice/job.scope\n", s_root) == 524288000L);
    /* a namespace: the process's own cgroup is the mount's root */
    s_put("memory.max", "262144000\n");
    CHECK(trn_memlimit_cgroup("0::/\n", s_root) == 262144000L);
    /* no limit anywhere */
    s_fresh_root();
    s_put("a/memory.max", "max\n");
    CHECK(trn_memlimit_cgroup("0::/a\n", s_root) == -1);
    CHECK(trn_memlimit_cgroup("0::/missing/path\n", s_root) == -1);
    CHECK(trn_memlimit_cgroup("", s_root) == -1);
}

TEST(cgroup_v1_memory_controller_and_its_parents)
{
    s_fresh_root();
    const long long unlimited = 9223372036854771712LL;
    char u[32];
    snprintf(u, sizeof u, "%lld\n", unlimited);
    s_put("memory/memory.limit_in_bytes", u);
    /* this VM's kind: the memory line among v1 controllers, unlimited */
    const char *vm = "9:name=systemd:/\n4:memory:/process_api/b5be\n1:cpu:/\n0::/\n";
    CHECK(trn_memlimit_cgroup(vm, s_root) == -1);
    /* a container: /proc shows the host's path, the limit sits at the
       mount's root (the path under it does not exist) */
    s_put("memory/memory.limit_in_bytes", "3145728000\n");
    CHECK(trn_memlimit_cgroup(vm, s_root) == 3145728000L);
    /* the process's own group and a parent: the smallest */
    s_put("memory/process_api/b5be/memory.limit_in_bytes", "2097152000\n");
    CHECK(trn_memlimit_cgroup(vm, s_root) == 2097152000L);
    s_put("memory/process_api/memory.limit_in_bytes", "1048576000\n");
    CHECK(trn_memlimit_cgroup(vm, s_root) == 1048576000L);
    /* memory mounted with other controllers */
    CHECK(trn_memlimit_cgroup("5:cpu,memory:/process_api/b5be\n", s_root) == 1048576000L);
    /* other controllers alone are not read */
    CHECK(trn_memlimit_cgroup("3:cpuset:/process_api/b5be\n", s_root) == -1);
}

TEST(cgroup_hybrid_reads_both_and_takes_the_smaller)
{
    s_fresh_root();
    s_put("memory/job/memory.limit_in_bytes", "4000000000\n");
    s_put("job/memory.max", "3000000000\n");
    CHECK(trn_memlimit_cgroup("4:memory:/job\n0::/job\n", s_root) == 3000000000L);
    s_put("job/memory.max", "max\n");
    CHECK(trn_memlimit_cgroup("4:memory:/job\n0::/job", s_root) == 4000000000L);
}

/* "0::/../foo" (a cgroup outside the namespace's root): no file applies,
   unknown (before: root/../foo/memory.max, 555, outside it; then the
   root's own 9000000, which does not bound a cgroup outside it). */
TEST(a_path_with_dotdot_counts_as_unknown)
{
    s_fresh_root();
    char root[PATH_MAX + 8];
    snprintf(root, sizeof root, "%s/root", s_root);
    s_put("foo/memory.max", "555\n");
    s_put("root/foo/memory.max", "777\n");
    CHECK(trn_memlimit_cgroup("0::/../foo\n", root) == -1);
    CHECK(trn_memlimit_cgroup("0::/a/../../foo\n", root) == -1);
    s_put("root/memory.max", "9000000\n");
    CHECK(trn_memlimit_cgroup("0::/../foo\n", root) == -1);
    CHECK(trn_memlimit_cgroup("0::/foo\n", root) == 777); /* no "..": walked */
    s_put("memory/memory.limit_in_bytes", "888\n");
    CHECK(trn_memlimit_cgroup("3:memory:/../foo\n", s_root) == -1);
    CHECK(trn_memlimit_cgroup("3:memory:/foo\n", s_root) == 888); /* its root */
}

/* The whole pipeline against a fake tree: this process's cgroup file
   (trn_memlimit_set_paths) past 8 KiB, its v2 line last, then the bf16
   copy's limit (trn__xh_limit) is the cgroup's 160 MB / 16 (before: the
   file's first 8 191 bytes only, the line cut: no cgroup limit, and the
   pipeline could not be pointed at a fake tree at all). */
TEST(the_bf16_copy_limit_reads_the_cgroup_file_whole)
{
    s_fresh_root();
    char text[12000] = "";
    size_t n = 0;
    for (int i = 0; n < 9000; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%d:cpu,cpuacct:/pad/%04d\n",
                              100 + i, i);
    snprintf(text + n, sizeof text - n, "0::/job/step\n");
    s_put("cgroup", text);
    s_put("fs/job/memory.max", "160000000\n");
    char file[PATH_MAX + 16], root[PATH_MAX + 16];
    snprintf(file, sizeof file, "%s/cgroup", s_root);
    snprintf(root, sizeof root, "%s/fs", s_root);
    trn_memlimit_set_paths(file, root);
    long cg = trn_memlimit_cgroup_self(), lim = trn__xh_limit();
    long av = trn_memlimit_available();
    trn_memlimit_set_paths(NULL, NULL);
    printf("  fake cgroup file %zu bytes: cgroup %ld, bf16 copy limit %ld\n",
           strlen(text), cg, lim);
    CHECK(cg == 160000000L);
    if (av > 0 && av / 16 < 10000000L)
        SKIP("MemAvailable (%ld) is below the fake cgroup's limit", av);
    CHECK(lim == 10000000L);
}

/* This process's figures; the cgroup's equals the resolver on the text of
   /proc/self/cgroup under /sys/fs/cgroup (before: a check that could not
   fail, -1 or positive). */
TEST(this_process_figures_are_read)
{
    long cg = trn_memlimit_cgroup_self(), av = trn_memlimit_available();
    long phys = trn_memlimit_phys();
    printf("  memory %.0f MB, cgroup %.0f MB, available %.0f MB\n", phys / 1e6, cg / 1e6,
           av / 1e6);
    CHECK(phys > 0 && phys < LONG_MAX);
    CHECK(av > 0 && av <= phys);
    char text[65536];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        SKIP("no /proc/self/cgroup here");
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    CHECK(cg == trn_memlimit_cgroup(text, "/sys/fs/cgroup"));
}

int main(void)
{
    RUN(pick_takes_the_smallest_known_figure);
    RUN(cgroup_v2_nested_takes_the_smallest_memory_max_up_to_the_root);
    RUN(cgroup_v1_memory_controller_and_its_parents);
    RUN(cgroup_hybrid_reads_both_and_takes_the_smaller);
    RUN(a_path_with_dotdot_counts_as_unknown);
    RUN(the_bf16_copy_limit_reads_the_cgroup_file_whole);
    RUN(this_process_figures_are_read);
    if (s_root[0])
        s_rm_tree();
    TEST_DONE();
}
