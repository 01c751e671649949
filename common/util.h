/*  util.h - the small helpers several parts need: one place to look first.

    Random numbers (splitmix64), clocks, string formatting, directories,
    random hex ids, and the daemons' allocators. Everything here is
    thread-safe and keeps no global state.

    Users: the daemons and the CLI; jizhi-train takes util_now,
    util_splitmix64 and util_reexec_self only (trainer/README.md, "What it
    takes from common/").

    Out-of-memory policy. An allocation failure in a daemon must never
    leave a change half applied. Daemon code that can back out cleanly
    checks every allocation and fails the one operation (the dispatcher
    does so throughout); code that cannot allocates through util_xmalloc
    and friends, which log one line and abort(), as Redis's zmalloc does:
    the store makes the restart safe (a controller resumes from its
    database). The trial helper library (libjizhi) never aborts its host
    program: it checks every allocation and reports failure through its
    return values, and so do the parsers of user input (spec.c, wire.c).
*/
#ifndef JZ_UTIL_H
#define JZ_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

/* ---- random numbers ---- */

/* One step of splitmix64: advances *state and returns 64 random bits.
   Small, fast and good enough for sampling hyperparameters and ids. */
uint64_t util_splitmix64(uint64_t *state);

/* A uniform double in (0, 1), never 0 or 1, from *state. */
double util_unif01(uint64_t *state);

/* A standard normal deviate from *state (Box-Muller). */
double util_normal(uint64_t *state);

/* How long to wait, in seconds, after the `sends`-th unanswered send of
   a request (sends >= 1) before sending it again: exponential backoff
   with jitter, base * 2^(sends-1) capped at `cap`, stretched by a random
   factor in [1, 1.5) from *state. Peers that resend (the trial helper,
   the dispatcher's reports) use it so that an overloaded or stopped
   controller is not sent more the longer it takes to answer, and so
   that peers that lost their answers at once do not resend at once. */
double util_backoff(int sends, double base, double cap, uint64_t *state);

/* Fills out with 2*nbytes lowercase hex digits of random bytes from
   /dev/urandom (a clock-and-pid seeded splitmix64 when that cannot be
   read), NUL-terminated. out must hold 2*nbytes + 1 bytes. */
void util_random_hex(char *out, size_t nbytes);

/* ---- clocks ---- */

/* Monotonic clock, in seconds (for timeouts and intervals). */
double util_now(void);
/* Wall clock, in seconds since the epoch (for what is stored or shown). */
double util_wall(void);
/* The CLOCK_MONOTONIC time `ms` milliseconds from now (ms >= 0), as
   pthread_cond_timedwait wants it with a condition variable whose clock
   is CLOCK_MONOTONIC. */
struct timespec util_deadline(int ms);

/* ---- settings ---- */

/* `max`, or the positive number in environment variable `name` when it
   is lower (tests shorten a limit; never lengthen it): text that is not a
   number, 0, a negative or a larger value leaves `max`. */
double util_env_at_most(const char *name, double max);

/* ---- strings and files ---- */

/* printf into a new string. Caller owns the result and must free it.
   NULL when memory runs out. */
char *util_strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *util_vstrf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/* The index of text among names[0..n) (an enum's name table), or -1 when
   it is none of them or NULL. */
int util_name_index(const char *const *names, int n, const char *text);

/* Length of the valid UTF-8 sequence at s (n >= 1 bytes left): 1 to 4, or
   0 when the bytes there are not UTF-8 (overlong two-byte forms included)
   or are cut off by the end. */
size_t util_utf8_len(const unsigned char *s, size_t n);

/* Reads /proc/PID/stat into buf (size bytes, NUL-terminated) and returns
   where the fields after the command name start (just past its ")", so
   " S 1 ..."; the name may hold spaces and parentheses), or NULL when the
   process is gone or the text is not what Linux writes. */
const char *util_proc_stat(long pid, char *buf, size_t size);

/* Runs this program again with argv (and the environment as it is now):
   execv of the file /proc/self/exe names, so the process keeps its name
   (ps, pgrep and /proc/PID/comm see "jizhi-train", not "exe"). Returns
   only when the exec failed (errno set). */
void util_reexec_self(char **argv);

/* Makes room for index n in a heap array: arrayp is the address of the
   caller's pointer (T **, NULL for none yet), *cap the elements it holds,
   size one element's bytes. Doubles the capacity (16 at first) until n fits.
   0, or -1 when memory runs out or the size overflows (the array and *cap
   are left as they were; the caller still owns the array). */
int util_reserve(void *arrayp, size_t *cap, size_t n, size_t size);

/* mkdir -p with `mode` for the directories it creates. 0 when path is a
   directory afterwards, else -1 with errno set (ENOTDIR when something
   other than a directory is in the way). */
int util_mkdirs(const char *path, mode_t mode);

/* ---- signals ---- */

/* Installs handler (plain sa_handler, no flags, empty mask) for SIGINT and SIGTERM,
   and SIGHUP too when hup. Async-signal-safe (a forked child may call it). */
void util_on_stop_signals(void (*handler)(int), int hup);

/* ---- allocators that abort (the daemons' policy, see above) ---- */

void *util_xmalloc(size_t size);
void *util_xcalloc(size_t n, size_t size);
void *util_xrealloc(void *p, size_t size);
char *util_xstrf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
