/*  sched_rows.c - the schedulers' find-or-append per-trial table (sched.h).

    A linear scan: a study's trials number in the hundreds and each call
    touches one row, so a scan over rows that sit together in memory is as
    fast as a map and keeps the rows in the order their trials arrived
    (which the saved states rely on).
*/
#include "sched.h"

#include <stdlib.h>
#include <string.h>

void *sched_rows_get(void *rowsp, size_t *n, size_t *cap, size_t size, long id,
                     int create, int *created)
{
    char *rows;
    memcpy(&rows, rowsp, sizeof rows);
    if (created)
        *created = 0;
    for (size_t i = 0; i < *n; i++) {
        long rid;
        memcpy(&rid, rows + i * size, sizeof rid);
        if (rid == id)
            return rows + i * size;
    }
    if (!create)
        return NULL;
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        char *nrows = realloc(rows, ncap * size);
        if (!nrows)
            return NULL;
        rows = nrows;
        memcpy(rowsp, &rows, sizeof rows);
        *cap = ncap;
    }
    char *row = rows + (*n)++ * size;
    memset(row, 0, size);
    memcpy(row, &id, sizeof id);
    if (created)
        *created = 1;
    return row;
}
