/*  web_buf.h - a growing text buffer for building large JSON replies
    faster than jansson (curves carry ~10^5 numbers). Value struct on the
    caller's storage; aborts on out-of-memory (the web server's policy,
    like jansson's own allocator use in the rest of jizhi). */
#ifndef JZ_WEB_BUF_H
#define JZ_WEB_BUF_H

#include <stddef.h>

typedef struct {
    char *data; /* NUL-terminated; owned */
    size_t len, cap;
} web_buf;

void web_buf_init(web_buf *b);
void web_buf_fini(web_buf *b);
/* Appends n bytes / a C string / printf text. */
void web_buf_add(web_buf *b, const char *s, size_t n);
void web_buf_str(web_buf *b, const char *s);
void web_buf_printf(web_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A number as JSON (null for NaN/inf): integers exactly, others with 7
   significant digits. */
void web_buf_num(web_buf *b, double x);
/* An integer. */
void web_buf_long(web_buf *b, long x);
/* A JSON string with escapes. */
void web_buf_jstr(web_buf *b, const char *s);
/* Takes the text (caller owns and frees it), leaving b empty. */
char *web_buf_take(web_buf *b, size_t *len);

#endif
