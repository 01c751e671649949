/*  util.c - small shared helpers (see util.h). */
#include "util.h"

#include "log.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void util_random_hex(char *out, size_t nbytes)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[64];
    size_t done = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    while (done < nbytes) {
        size_t n = nbytes - done < sizeof raw ? nbytes - done : sizeof raw;
        if (fd < 0 || read(fd, raw, n) != (ssize_t)n) {
            /* no urandom: a weaker but still per-process value */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                         ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)out;
            for (size_t i = 0; i < n; i++) {
                x += 0x9E3779B97F4A7C15ULL; /* splitmix64 */
                uint64_t z = x;
                z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
                z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
                raw[i] = (unsigned char)(z ^ (z >> 31));
            }
        }
        for (size_t i = 0; i < n; i++) {
            out[2 * (done + i)] = hex[raw[i] >> 4];
            out[2 * (done + i) + 1] = hex[raw[i] & 15];
        }
        done += n;
    }
    out[2 * nbytes] = 0;
    if (fd >= 0)
        close(fd);
}

static void s_oom(size_t size)
{
    log_error("util", "out of memory (%zu bytes); aborting", size);
    abort();
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

char *util_xstrdup(const char *s)
{
    char *p = strdup(s);
    if (!p)
        s_oom(strlen(s) + 1);
    return p;
}
