/*  spec_internal.h - helpers shared by the files of the spec part (spec.c,
    which parses the spec, and spec_param.c, parameter math); not for use
    outside common/spec*.c.
*/
#ifndef JZ_SPEC_INTERNAL_H
#define JZ_SPEC_INTERNAL_H

#include "spec.h"

/* Fills err (when not NULL) with the field and the printf-formatted text.
   Always returns -1, so a check can `return spec__fail(...)`. */
int spec__fail(spec_error *err, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes v (an integer or a real) as the shortest text that reads back as
   the same number into buf (size bytes, NUL-terminated). */
void spec__format_number(const json_t *v, char *buf, size_t size);

/* Refuses a space whose choice values in all, or whose parameters' JSON
   (JIZHI_PARAMS), pass the limits of docs/spec.md; 0 or -1 with err. */
int spec__check_sizes(const spec_t *s, spec_error *err);

/* Refuses a trial.command argument that can pass the exec limit once its
   placeholders hold their longest values; 0 or -1 with err. */
int spec__check_args(const spec_t *s, spec_error *err);

/* Parses p's "step" (def_step, borrowed, may be NULL: none) once its
   type, low, high and log are known: a whole number >= 1 for int, a
   number > 0 for float, (high - low) a whole number of steps, never with
   log. 0, or -1 with err naming path.step. */
int spec__parse_step(spec_param *p, const json_t *def_step, const char *path,
                     spec_error *err);

#endif
