/*  log_syslog.c - the syslog sink of log.c. Kept in its own file because
    <syslog.h> defines LOG_INFO and LOG_DEBUG, which clash with log.h's
    log_level names; this file does not include log.h. */
#include <syslog.h>

void log__syslog_open(const char *ident);
void log__syslog_write(int level, const char *text);

void log__syslog_open(const char *ident)
{
    openlog(ident, LOG_PID, LOG_DAEMON);
}

/* level: 0 error, 1 warn, 2 info, 3 debug (log_level's order) */
void log__syslog_write(int level, const char *text)
{
    static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
    syslog(prio[level < 0 ? 0 : level > 3 ? 3 : level], "%s", text);
}
