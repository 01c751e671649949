/*  util.c - see util.h. */
#define _GNU_SOURCE /* vasprintf */
#include "common/util.h"

#include "common/log.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t util_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

double util_unif01(uint64_t *state)
{
    return ((double)(util_splitmix64(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double util_backoff(int sends, double base, double cap, uint64_t *state)
{
    double d = base;
    for (int i = 1; i < sends && d < cap; i++)
        d *= 2;
    if (d > cap)
        d = cap;
    return d * (1.0 + 0.5 * util_unif01(state));
}

double util_normal(uint64_t *state)
{
    double u = util_unif01(state), v = util_unif01(state);
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

void util_random_hex(char *out, size_t nbytes)
{
    unsigned char raw[64];
    size_t n = nbytes < sizeof raw ? nbytes : sizeof raw;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(raw, 1, n, f) != n) {
        uint64_t x = (uint64_t)getpid() * 0x9E3779B97F4A7C15ULL ^
                     (uint64_t)(util_wall() * 1e9) ^ (uint64_t)(util_now() * 1e9);
        for (size_t i = 0; i < n; i += 8) {
            uint64_t r = util_splitmix64(&x);
            memcpy(raw + i, &r, n - i < 8 ? n - i : 8);
        }
    }
    if (f)
        fclose(f);
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    out[2 * n] = 0;
}

double util_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double util_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct timespec util_deadline(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

size_t util_utf8_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80             ? 1
                 : (s[0] & 0xE0) == 0xC0 ? 2
                 : (s[0] & 0xF0) == 0xE0 ? 3
                 : (s[0] & 0xF8) == 0xF0 ? 4
                                         : 0;
    if (len == 0 || len > n || (len == 2 && s[0] < 0xC2))
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

const char *util_proc_stat(long pid, char *buf, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t n = fread(buf, 1, size - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    return p ? p + 1 : NULL;
}

void util_reexec_self(char **argv)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0 && (size_t)n < sizeof exe - 1) {
        exe[n] = 0;
        execv(exe, argv);
    }
    execv("/proc/self/exe",
          argv); /* the file was replaced or renamed: still this program */
}

int util_reserve(void *arrayp, size_t *cap, size_t n, size_t size)
{
    void *p;
    memcpy(&p, arrayp, sizeof p);
    if (p && n < *cap)
        return 0;
    size_t ncap = p && *cap ? *cap : 16;
    while (ncap <= n) {
        if (ncap > SIZE_MAX / 2)
            return -1;
        ncap *= 2;
    }
    if (size && ncap > SIZE_MAX / size)
        return -1;
    void *more = realloc(p, ncap * size);
    if (!more)
        return -1;
    memcpy(arrayp, &more, sizeof more);
    *cap = ncap;
    return 0;
}

double util_env_at_most(const char *name, double max)
{
    const char *e = getenv(name);
    double v = e ? atof(e) : 0;
    return v > 0 && v <= max ? v : max;
}

int util_name_index(const char *const *names, int n, const char *text)
{
    for (int i = 0; text && i < n; i++)
        if (names[i] && !strcmp(text, names[i]))
            return i;
    return -1;
}

char *util_vstrf(const char *fmt, va_list ap)
{
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        return NULL;
    return s;
}

char *util_strf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = util_vstrf(fmt, ap);
    va_end(ap);
    return s;
}

int util_mkdirs(const char *path, mode_t mode)
{
    if (!path || !*path) {
        errno = ENOENT;
        return -1;
    }
    char *p = strdup(path);
    if (!p)
        return -1;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != 0)
            continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, mode) != 0 && errno != EEXIST) {
            int e = errno;
            free(p);
            errno = e;
            return -1;
        }
        *s = c;
        if (!c)
            break;
    }
    struct stat sb;
    errno = 0;
    int rc = (stat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) ? 0 : -1;
    if (rc != 0 && errno == 0)
        errno = ENOTDIR;
    free(p);
    return rc;
}

static void s_oom(size_t size)
{
    log_error("jizhi", "out of memory (%zu bytes): aborting", size);
    abort();
}

void util_on_stop_signals(void (*handler)(int), int hup)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (hup)
        sigaction(SIGHUP, &sa, NULL);
}

void *util_xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p)
        s_oom(size);
    return p;
}

void *util_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        s_oom(n * size);
    return p;
}

void *util_xrealloc(void *p, size_t size)
{
    void *q = realloc(p, size ? size : 1);
    if (!q)
        s_oom(size);
    return q;
}

char *util_xstrf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = util_vstrf(fmt, ap);
    va_end(ap);
    if (!s)
        s_oom(strlen(fmt));
    return s;
}
