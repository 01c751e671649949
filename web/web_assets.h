/*  web_assets.h - the page's files, built into the binary.

    The table is generated at build time (scripts/embed-assets.py) from
    web/assets/ and Debian's Chart.js (libjs-chart.js) into
    $(BUILD)/gen/web_assets.c; nothing is read from disk when serving. */
#ifndef JZ_WEB_ASSETS_H
#define JZ_WEB_ASSETS_H

#include <stddef.h>

typedef struct {
    const char *path;  /* "/index.html", "/app.js", ... */
    const char *ctype; /* Content-Type */
    const unsigned char *data;
    size_t len;
} web_asset;

extern const web_asset web_assets[];
extern const size_t web_nassets;

#endif
