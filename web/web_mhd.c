/*  web_mhd.c - libmicrohttpd loaded at run time (see web_mhd.h). */
#include "web_mhd.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define MHD_SONAME "libmicrohttpd.so.12"

web_mhd_api web__mhd;

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static char s_err[512]; /* empty: loaded */

static int s_sym(void *lib, const char *name, void **out)
{
    *out = dlsym(lib, name);
    if (*out)
        return 0;
    snprintf(s_err, sizeof s_err, "%s has no %s (too old?)", MHD_SONAME, name);
    return -1;
}

static void s_load(void)
{
    void *lib = dlopen(MHD_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(s_err, sizeof s_err,
                 "the web server needs %s (Debian package libmicrohttpd12; "
                 "scripts/install-deps.sh installs it): %s",
                 MHD_SONAME, dlerror());
        return;
    }
    web_mhd_api a;
    static const char *const names[] = {
        "MHD_start_daemon",
        "MHD_stop_daemon",
        "MHD_get_daemon_info",
        "MHD_lookup_connection_value",
        "MHD_create_response_from_buffer",
        "MHD_create_response_from_buffer_with_free_callback",
        "MHD_create_response_from_callback",
        "MHD_add_response_header",
        "MHD_queue_response",
        "MHD_destroy_response",
        "MHD_get_connection_info",
    };
    void **slots[] = {
        (void **)&a.start_daemon,
        (void **)&a.stop_daemon,
        (void **)&a.get_daemon_info,
        (void **)&a.lookup_connection_value,
        (void **)&a.create_response_from_buffer,
        (void **)&a.create_response_from_buffer_with_free_callback,
        (void **)&a.create_response_from_callback,
        (void **)&a.add_response_header,
        (void **)&a.queue_response,
        (void **)&a.destroy_response,
        (void **)&a.get_connection_info,
    };
    _Static_assert(sizeof names / sizeof *names == sizeof slots / sizeof *slots,
                   "one slot per name");
    _Static_assert(sizeof slots / sizeof *slots == sizeof(web_mhd_api) / sizeof(void *),
                   "every function of the table is loaded");
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (s_sym(lib, names[i], slots[i]) != 0) {
            dlclose(lib);
            return;
        }
    web__mhd = a; /* the library stays loaded for the process's life */
}

int web_mhd_load(char *err, size_t errsize)
{
    pthread_once(&s_once, s_load);
    if (!s_err[0])
        return 0;
    snprintf(err, errsize, "%s", s_err);
    return -1;
}
