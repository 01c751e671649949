/*  web_buf.c - growing text buffer (see web_buf.h). */
#include "web_buf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void web_buf_init(web_buf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}

void web_buf_fini(web_buf *b)
{
    free(b->data);
    web_buf_init(b);
}

static void s_reserve(web_buf *b, size_t more)
{
    if (b->len + more + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d)
        abort();
    b->data = d;
    b->cap = cap;
}

void web_buf_add(web_buf *b, const char *s, size_t n)
{
    s_reserve(b, n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void web_buf_str(web_buf *b, const char *s)
{
    web_buf_add(b, s, strlen(s));
}

void web_buf_printf(web_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    s_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void web_buf_long(web_buf *b, long x)
{
    char tmp[24];
    int i = (int)sizeof tmp;
    unsigned long u = x < 0 ? 0UL - (unsigned long)x : (unsigned long)x;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (x < 0)
        tmp[--i] = '-';
    web_buf_add(b, tmp + i, sizeof tmp - (size_t)i);
}

void web_buf_num(web_buf *b, double x)
{
    if (!isfinite(x)) {
        web_buf_add(b, "null", 4);
        return;
    }
    if (x == (double)(long)x && fabs(x) < 1e15) {
        web_buf_long(b, (long)x);
        return;
    }
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%.7g", x);
    web_buf_add(b, tmp, (size_t)n);
}

void web_buf_jstr(web_buf *b, const char *s)
{
    web_buf_add(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            web_buf_add(b, e, 2);
        } else if (*p < 0x20) {
            web_buf_printf(b, "\\u%04x", *p);
        } else {
            web_buf_add(b, (const char *)p, 1);
        }
    }
    web_buf_add(b, "\"", 1);
}

char *web_buf_take(web_buf *b, size_t *len)
{
    if (!b->data)
        web_buf_add(b, "", 0);
    char *d = b->data;
    if (len)
        *len = b->len;
    web_buf_init(b);
    return d;
}
