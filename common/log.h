/*  log.h - the one logging module: levels, a component tag, a sink.

    log_msg(LOGL_WARN, "ctl", "trial %ld: %s", id, why) writes
    "2026-11-29T19:46:47.123Z warn  ctl: trial 7: ..." to the sink (stderr
    by default, or a file). The level threshold comes from JIZHI_LOG
    (error, warn, info, debug; default info). Sinks: stderr (default), a
    file, or syslog. Thread-safe.
*/
#ifndef JZ_LOG_H
#define JZ_LOG_H

#include <stdio.h>

/* LOGL_, not LOG_: <syslog.h> owns LOG_INFO and LOG_DEBUG. */
typedef enum { LOGL_ERROR = 0, LOGL_WARN, LOGL_INFO, LOGL_DEBUG } log_level;

/* Sets the threshold; messages above it are dropped. */
void log_set_level(log_level level);

/* Opens `path` for appending and makes it the sink. 0 or -1. */
int log_open_file(const char *path);

/* Sends messages to syslog (facility daemon, ident `ident`, borrowed:
   must stay valid) instead of a file. */
void log_use_syslog(const char *ident);

/* "syslog", or a file path: the daemons' --log option. 0 or -1. */
int log_set_target(const char *target);

/* 1 when a message at `level` would be written. */
int log_enabled(log_level level);

void log_msg(log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_error(c, ...) log_msg(LOGL_ERROR, c, __VA_ARGS__)
#define log_warn(c, ...) log_msg(LOGL_WARN, c, __VA_ARGS__)
#define log_info(c, ...) log_msg(LOGL_INFO, c, __VA_ARGS__)
#define log_debug(c, ...) log_msg(LOGL_DEBUG, c, __VA_ARGS__)

#endif
