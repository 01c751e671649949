/*  memlimit.c - how much memory this process may use (memlimit.h): the
    machine's, its cgroup's (v1 and v2) and the kernel's MemAvailable.
*/
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer/memlimit.h"

/* cgroup v1 writes this (2^63 rounded down to a page) for "no limit". */
#define S_V1_UNLIMITED 9223372036854771712LL

long trn_memlimit_pick(long phys, long cgroup, long avail, long div, long cap)
{
    long mem = LONG_MAX;
    const long fig[3] = {phys, cgroup, avail};
    for (int i = 0; i < 3; i++)
        if (fig[i] > 0 && fig[i] < mem)
            mem = fig[i];
    if (mem == LONG_MAX)
        return cap;
    long lim = mem / (div >= 1 ? div : 1);
    return lim < cap ? lim : cap;
}

/* The number on a file's first line; -1 for "max", a bad number or an
   unreadable file. */
static long long s_read_number(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[64];
    long long v = -1;
    if (fgets(line, sizeof line, f)) {
        char *end;
        long long x = strtoll(line, &end, 10);
        if (end != line && x >= 0 && (*end == '\n' || *end == 0))
            v = x;
    }
    fclose(f);
    return v;
}

/* 1 when the path [path, path + plen) has a ".." component: outside the
   cgroup namespace's root (/proc/self/cgroup shows "0::/../foo" for a
   cgroup beside it), which the mount does not show under dir. */
static int s_has_dotdot(const char *path, size_t plen)
{
    for (size_t i = 0; i < plen;) {
        size_t j = i;
        while (j < plen && path[j] != '/')
            j++;
        if (j - i == 2 && path[i] == '.' && path[i + 1] == '.')
            return 1;
        i = j + 1;
    }
    return 0;
}

/* The smallest limit in file `leaf` of dir/path and its parents up to dir
   (values >= unlimited ignored). -1 when none, and for a path with a ".."
   component: this process's cgroup is outside the namespace's root, so
   neither a sibling's files nor the root's own limit apply to it. */
static long long s_walk(const char *dir, const char *path, size_t plen, const char *leaf,
                        long long unlimited)
{
    if (s_has_dotdot(path, plen))
        return -1;
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%.*s", dir, (int)plen, path) >= (int)sizeof p)
        return -1;
    size_t root_len = strlen(dir);
    long long best = -1;
    for (;;) {
        size_t n = strlen(p);
        while (n > root_len && p[n - 1] == '/') /* "/p/" or the root's "/" */
            p[--n] = 0;
        char file[PATH_MAX + 64];
        snprintf(file, sizeof file, "%s/%s", p, leaf);
        long long v = s_read_number(file);
        if (v > 0 && v < unlimited && (best < 0 || v < best))
            best = v;
        if (n <= root_len)
            break;
        char *slash = strrchr(p + root_len, '/');
        if (!slash)
            break;
        *slash = 0;
    }
    return best;
}

/* 1 when the comma-separated list [s, s + n) names ctl. */
static int s_has_controller(const char *s, size_t n, const char *ctl)
{
    size_t cn = strlen(ctl);
    for (const char *e = s + n; s < e;) {
        const char *c = memchr(s, ',', (size_t)(e - s));
        size_t len = c ? (size_t)(c - s) : (size_t)(e - s);
        if (len == cn && !memcmp(s, ctl, cn))
            return 1;
        s += len + 1;
    }
    return 0;
}

long trn_memlimit_cgroup(const char *text, const char *root)
{
    long long best = -1;
    char v1root[PATH_MAX];
    snprintf(v1root, sizeof v1root, "%s/memory", root);
    for (const char *l = text; l && *l;) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l);
        /* "id:controllers:path" */
        const char *c1 = memchr(l, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - l)) : NULL;
        if (c2) {
            const char *path = c2 + 1;
            size_t plen = len - (size_t)(path - l);
            size_t clen = (size_t)(c2 - c1 - 1);
            long long v = -1;
            if (clen == 0 && c1 - l == 1 && l[0] == '0') /* v2 */
                v = s_walk(root, path, plen, "memory.max", LLONG_MAX);
            else if (s_has_controller(c1 + 1, clen, "memory"))
                v = s_walk(v1root, path, plen, "memory.limit_in_bytes", S_V1_UNLIMITED);
            if (v > 0 && (best < 0 || v < best))
                best = v;
        }
        l = nl ? nl + 1 : NULL;
    }
    return best > LONG_MAX ? LONG_MAX : (long)best;
}

/* Where trn_memlimit_cgroup_self reads (trn_memlimit_set_paths). */
static const char *s_self_file = "/proc/self/cgroup";
static const char *s_self_root = "/sys/fs/cgroup";

void trn_memlimit_set_paths(const char *cgroup_file, const char *root)
{
    s_self_file = cgroup_file ? cgroup_file : "/proc/self/cgroup";
    s_self_root = root ? root : "/sys/fs/cgroup";
}

long trn_memlimit_cgroup_self(void)
{
    FILE *f = fopen(s_self_file, "r");
    if (!f)
        return -1;
    /* the whole file, however long (before: its first 8 191 bytes, a line
       cut there walked a prefix of its path) */
    char *text = NULL;
    size_t cap = 0;
    ssize_t n = getdelim(&text, &cap, 0, f);
    fclose(f);
    long v = n > 0 ? trn_memlimit_cgroup(text, s_self_root) : -1;
    free(text);
    return v;
}

long trn_memlimit_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char line[256];
    long v = -1;
    static const char key[] = "MemAvailable:";
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, sizeof key - 1))
            continue;
        char *end;
        long long kb = strtoll(line + sizeof key - 1, &end, 10);
        if (end != line + sizeof key - 1 && kb >= 0)
            v = kb > LONG_MAX / 1024 ? LONG_MAX : (long)(kb * 1024);
        break;
    }
    fclose(f);
    return v;
}

long trn_memlimit_phys(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 && pages <= LONG_MAX / psz ? pages * psz : LONG_MAX;
}
