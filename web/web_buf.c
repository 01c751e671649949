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

/* 7 significant digits without printf (curves send ~10^5 numbers): the
   value scaled to a 7-digit integer, the decimal point placed by hand.
   Integers below 1e15 print exactly; outside [1e-5, 1e15) it falls back
   to %.7g. */
void web_buf_num(web_buf *b, double x)
{
    if (!isfinite(x)) {
        web_buf_add(b, "null", 4);
        return;
    }
    double a = fabs(x);
    if (a < 1e15 && x == (double)(long long)x) { /* steps, counts: exact */
        web_buf_long(b, (long)x);
        return;
    }
    if (a < 1e-5 || a >= 1e15) {
        char tmp[32];
        int n = snprintf(tmp, sizeof tmp, "%.7g", x);
        web_buf_add(b, tmp, (size_t)n);
        return;
    }
    /* a = d.dddddd * 10^e, found in a table (no log10/pow per number) */
    static const double p10[] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1e0,
                                 1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14,
                                 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21};
#define P10(k) p10[(k) + 6]
    int e = -5;
    while (e < 14 && a >= P10(e + 1))
        e++;
    long long m = llround(6 - e >= 0 ? a * P10(6 - e) : a / P10(e - 6));
    if (m >= 10000000LL) { /* rounding carried into an 8th digit */
        m = llround((double)m / 10);
        e++;
    }
#undef P10
    char digits[8];
    for (int i = 6; i >= 0; i--) {
        digits[i] = (char)('0' + m % 10);
        m /= 10;
    }
    int nd = 7;
    char tmp[40];
    int n = 0;
    if (x < 0)
        tmp[n++] = '-';
    if (e >= 6) { /* an integer of e+1 digits */
        for (int i = 0; i <= e; i++)
            tmp[n++] = i < 7 ? digits[i] : '0';
    } else {
        while (nd > e + 1 && nd > 0 && digits[nd - 1] == '0')
            nd--; /* trailing zeros after the point */
        if (e >= 0) {
            for (int i = 0; i <= e; i++)
                tmp[n++] = digits[i];
            if (nd > e + 1) {
                tmp[n++] = '.';
                for (int i = e + 1; i < nd; i++)
                    tmp[n++] = digits[i];
            }
        } else {
            tmp[n++] = '0';
            tmp[n++] = '.';
            for (int i = -1; i > e; i--)
                tmp[n++] = '0';
            for (int i = 0; i < nd; i++)
                tmp[n++] = digits[i];
        }
    }
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
