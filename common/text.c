/*  text.c - numbers and times as text people read (see text.h). */
#include "text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

char *text_double(double v, char buf[TEXT_DOUBLE_MAX])
{
    if (isnan(v)) {
        strcpy(buf, "nan");
        return buf;
    }
    if (isinf(v)) {
        strcpy(buf, v < 0 ? "-inf" : "inf");
        return buf;
    }
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(buf, TEXT_DOUBLE_MAX, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    /* %g writes 50 with one digit as 5e+01: a whole number of up to 15
       digits reads better written out ("50", "340"); below 1e15 such a
       value is that integer exactly, so the added digits are zeros */
    const char *e = strchr(buf, 'e');
    if (e) {
        int exp = atoi(e + 1);
        if (exp >= 0 && exp < 15)
            snprintf(buf, TEXT_DOUBLE_MAX, "%.*g", exp + 1 > prec ? exp + 1 : prec, v);
    }
    return buf;
}

/* Length of the JSON number starting at s, 0 when none starts there. */
static size_t s_number_len(const char *s, int *is_real)
{
    const char *p = s;
    *is_real = 0;
    if (*p == '-')
        p++;
    if (*p < '0' || *p > '9')
        return 0;
    while ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E' ||
           ((*p == '+' || *p == '-') && (p[-1] == 'e' || p[-1] == 'E'))) {
        if (*p == '.' || *p == 'e' || *p == 'E')
            *is_real = 1;
        p++;
    }
    return (size_t)(p - s);
}

void text_json_shorten(char *s)
{
    char *out = s;
    const char *in = s;
    int in_string = 0;
    while (*in) {
        if (in_string) {
            if (*in == '\\' && in[1]) {
                *out++ = *in++;
            } else if (*in == '"') {
                in_string = 0;
            }
            *out++ = *in++;
            continue;
        }
        if (*in == '"') {
            in_string = 1;
            *out++ = *in++;
            continue;
        }
        int is_real;
        int starts = (*in == '-' || (*in >= '0' && *in <= '9')) &&
                     (in == s || !((in[-1] >= '0' && in[-1] <= '9') || in[-1] == '.'));
        size_t n = starts ? s_number_len(in, &is_real) : 0;
        if (n == 0 || !is_real) {
            if (n == 0)
                n = 1;
            memmove(out, in, n);
            out += n;
            in += n;
            continue;
        }
        char buf[TEXT_DOUBLE_MAX + 2];
        text_double(strtod(in, NULL), buf);
        if (!strpbrk(buf, ".en"))
            strcat(buf, ".0");
        size_t m = strlen(buf);
        if (m > n) { /* cannot happen for json_dumps' %.17g output; keep it */
            memmove(out, in, n);
            out += n;
        } else {
            memcpy(out, buf, m);
            out += m;
        }
        in += n;
    }
    *out = 0;
}

char *text_json_dumps(const json_t *j, size_t flags)
{
    char *s = json_dumps(j, flags);
    if (s)
        text_json_shorten(s);
    return s;
}

char *text_time(double t, char buf[TEXT_TIME_MAX])
{
    if (!(t > 0)) {
        strcpy(buf, "-");
        return buf;
    }
    time_t secs = (time_t)floor(t);
    long ms = lround((t - (double)secs) * 1000.0);
    if (ms >= 1000) {
        secs++;
        ms -= 1000;
    }
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(buf, TEXT_TIME_MAX, "%Y-%m-%dT%H:%M:%S", &tm);
    if (ms)
        snprintf(buf + n, TEXT_TIME_MAX - n, ".%03ldZ", ms);
    else
        snprintf(buf + n, TEXT_TIME_MAX - n, "Z");
    return buf;
}
