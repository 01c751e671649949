/*  web_mhd.h - libmicrohttpd, loaded when a server starts.

    The jizhi binary serves HTTP only for `serve` and `--http`; every other
    command (`trial set`, `study show`, ...) would pay for loading
    libmicrohttpd and GnuTLS at each start. So web/ calls libmicrohttpd
    through this table, filled by web_mhd_load() from libmicrohttpd.so.12
    on the first web_new(). The types and constants still come from
    <microhttpd.h>.

    web_mhd_load: 0, or -1 with err naming the library and why it could
    not be loaded (not installed: scripts/install-deps.sh). Thread-safe;
    loads once. After a 0, `web__mhd` is filled and stays so.
*/
#ifndef JZ_WEB_MHD_H
#define JZ_WEB_MHD_H

#include <microhttpd.h>
#include <stddef.h>

typedef struct {
    struct MHD_Daemon *(*start_daemon)(unsigned int flags, uint16_t port,
                                       MHD_AcceptPolicyCallback apc, void *apc_cls,
                                       MHD_AccessHandlerCallback dh, void *dh_cls, ...);
    void (*stop_daemon)(struct MHD_Daemon *d);
    const union MHD_DaemonInfo *(*get_daemon_info)(struct MHD_Daemon *d,
                                                   enum MHD_DaemonInfoType type, ...);
    const char *(*lookup_connection_value)(struct MHD_Connection *c,
                                           enum MHD_ValueKind kind, const char *key);
    struct MHD_Response *(*create_response_from_buffer)(size_t size, void *buffer,
                                                        enum MHD_ResponseMemoryMode mode);
    struct MHD_Response *(*create_response_from_buffer_with_free_callback)(
        size_t size, void *buffer, MHD_ContentReaderFreeCallback crfc);
    struct MHD_Response *(*create_response_from_callback)(
        uint64_t size, size_t block_size, MHD_ContentReaderCallback crc, void *crc_cls,
        MHD_ContentReaderFreeCallback crfc);
    enum MHD_Result (*add_response_header)(struct MHD_Response *r, const char *header,
                                           const char *content);
    enum MHD_Result (*queue_response)(struct MHD_Connection *c, unsigned int status_code,
                                      struct MHD_Response *r);
    void (*destroy_response)(struct MHD_Response *r);
    const union MHD_ConnectionInfo *(*get_connection_info)(
        struct MHD_Connection *c, enum MHD_ConnectionInfoType type, ...);
} web_mhd_api;

extern web_mhd_api web__mhd;

int web_mhd_load(char *err, size_t errsize);

#endif
