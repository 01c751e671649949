/*  wire_points.h - the quick decoder of a `metrics` message's points.

    A `metrics` batch is mostly its "points" array: thousands of
    [step, "name", value] triples. Decoded by jansson, each triple is an
    array, an integer, a string and a real (five allocations and a locale
    lookup per point), about a third of the controller's CPU per point.
    wire_points_split reads the points of the plain form that libjizhi
    writes straight into a reused array and leaves the rest of the message
    (a few short fields) to jansson; anything else (an escape in a name, a
    step that is not a plain integer, a number out of range, another
    type) makes it decline, and the caller decodes the whole message with
    jansson as before, so that every refusal keeps its message. What it
    accepts decodes to the same points, bit for bit, as jansson plus
    wire_to_double.

    The plain form, with JSON whitespace anywhere between tokens:
      points: [ point (, point)* ] or []
      point:  [ step , "name" , value ]
      step:   -?(0|[1-9][0-9]*), at most 18 digits
      name:   [A-Za-z_][A-Za-z0-9_.]*, under 64 characters (jizhi.h's rule)
      value:  a JSON number (an integer of at most 18 digits, or one with a
              fraction or exponent whose strtod neither overflows nor
              underflows), or "nan", "inf", "-inf".

    Not thread-safe per object; no global state.
*/
#ifndef JZ_WIRE_POINTS_H
#define JZ_WIRE_POINTS_H

#include <jansson.h>
#include <stddef.h>

/* One point; `name` points into the decoder's own text. */
typedef struct {
    long step;
    const char *name; /* borrowed from the wire_points until the next split */
    double value;
} wire_point;

/* A reusable decoder: its buffers grow to the largest message seen. */
typedef struct {
    wire_point *p; /* owned: the last split's points, p[0..n) */
    size_t n, cap;
    char *names; /* owned: their names, each NUL-terminated */
    size_t names_cap;
    char *rest; /* owned: scratch, the message without its points */
    size_t rest_cap;
} wire_points;

/* Caller storage; no allocation until the first split. */
void wire_points_init(wire_points *wp);
/* Frees the buffers; the object may be initialised again. */
void wire_points_fini(wire_points *wp);

/* When `body` (len bytes, not NUL-terminated) is a JSON object of type
   "metrics" whose "points" member is in the plain form, fills wp->p[0..n)
   with its points and returns the message as jansson decodes it
   (JSON_REJECT_DUPLICATES) but with "points": [] (caller owns). Otherwise
   returns NULL and wp->n is 0: decode the body as usual. Aborts when out
   of memory (util_xmalloc). */
json_t *wire_points_split(wire_points *wp, const char *body, size_t len);

#endif
