/*  log.c - see log.h. */
#include "log.h"

#include "util.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <syslog.h>
#include <time.h>

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static int s_level = -1; /* -1: not read from the environment yet */
static FILE *s_sink;
static FILE *s_owned; /* sink opened by log_open_file */
static int s_syslog;  /* messages go to syslog */

static void s_syslog_write(log_level level, const char *text)
{
    static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
    syslog(prio[level > LOGL_DEBUG ? LOGL_DEBUG : level], "%s", text);
}

static const char *const s_names[] = {"error", "warn", "info", "debug"};

static int s_current_level(void)
{
    if (s_level < 0) {
        int i = util_name_index(s_names, 4, getenv("JIZHI_LOG"));
        s_level = i >= 0 ? i : LOGL_INFO;
    }
    return s_level;
}

void log_set_level(log_level level)
{
    pthread_mutex_lock(&s_lock);
    s_level = (int)level;
    pthread_mutex_unlock(&s_lock);
}

int log_open_file(const char *path)
{
    FILE *f = fopen(path, "a");
    if (!f)
        return -1;
    setvbuf(f, NULL, _IOLBF, 0);
    pthread_mutex_lock(&s_lock);
    if (s_owned)
        fclose(s_owned);
    s_owned = s_sink = f;
    pthread_mutex_unlock(&s_lock);
    return 0;
}

void log_use_syslog(const char *ident)
{
    pthread_mutex_lock(&s_lock);
    openlog(ident, LOG_PID, LOG_DAEMON);
    s_syslog = 1;
    pthread_mutex_unlock(&s_lock);
}

int log_set_target(const char *target)
{
    if (strcmp(target, "syslog") == 0) {
        log_use_syslog("jizhi");
        return 0;
    }
    return log_open_file(target);
}

int log_enabled(log_level level)
{
    pthread_mutex_lock(&s_lock);
    int on = (int)level <= s_current_level();
    pthread_mutex_unlock(&s_lock);
    return on;
}

void log_msg(log_level level, const char *component, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char line[2048];
    int n = snprintf(line, sizeof line,
                     "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s: ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     (long)tv.tv_usec / 1000, s_names[level], component);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&s_lock);
    if (s_syslog) {
        s_syslog_write(level, line + n); /* syslog stamps the time itself */
    } else {
        FILE *f = s_sink ? s_sink : stderr;
        fprintf(f, "%s\n", line);
        fflush(f);
    }
    pthread_mutex_unlock(&s_lock);
}
