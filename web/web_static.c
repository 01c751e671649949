/*  web_static.c - serves the built-in page files (web_assets.h) and
    nothing else: a path is looked up in the table, never on disk. */
#include "web_internal.h"

#include "web_assets.h"

#include <string.h>

int web__static(web_req *r)
{
    const char *path = !strcmp(r->path, "/") ? "/index.html" : r->path;
    for (size_t i = 0; i < web_nassets; i++) {
        if (strcmp(web_assets[i].path, path))
            continue;
        r->resp = web__mhd.create_response_from_buffer(
            web_assets[i].len, (void *)web_assets[i].data, MHD_RESPMEM_PERSISTENT);
        if (!r->resp)
            return 0;
        web__mhd.add_response_header(r->resp, "Content-Type", web_assets[i].ctype);
        web__mhd.add_response_header(r->resp, "Cache-Control", "no-cache");
        web__mhd.add_response_header(
            r->resp, "Content-Security-Policy",
            "default-src 'self'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; frame-ancestors 'none'");
        return 1;
    }
    return 0;
}
