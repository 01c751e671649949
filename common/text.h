/*  text.h - numbers and times as text people read.

    Doubles print as the shortest text that reads back (strtod) to the same
    double: 0.8728, not 0.87280000000000002. Times print as ISO 8601 in UTC.
    Every function here is pure and thread-safe; nothing prints.
*/
#ifndef JZ_TEXT_H
#define JZ_TEXT_H

#include <jansson.h>
#include <stddef.h>

/* Enough for any double written by text_double, with its terminator. */
#define TEXT_DOUBLE_MAX 32

/* Writes the shortest "%.Ng" text (N = 1..17) of `v` that strtod reads back
   exactly; "nan", "inf" and "-inf" for the non-finite. Returns buf. */
char *text_double(double v, char buf[TEXT_DOUBLE_MAX]);

/* json_dumps with every real written as by text_double (a real that is a
   whole number keeps its ".0", so it reads back as a real). Caller owns the
   result and must free() it; NULL on failure, as json_dumps. */
char *text_json_dumps(const json_t *j, size_t flags);

/* Rewrites, in place, each real number of the JSON text `s` (as written by
   json_dumps) to its shortest form. Strings are left alone. Never lengthens
   the text. */
void text_json_shorten(char *s);

/* Wall-clock seconds since the epoch as "2026-12-01T02:14:48.250Z" (UTC,
   milliseconds only when not whole); "-" when t <= 0 (not yet). Returns
   buf. */
#define TEXT_TIME_MAX 40
char *text_time(double t, char buf[TEXT_TIME_MAX]);

#endif
