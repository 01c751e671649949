/*  memlimit.h - how much memory this process may use: the machine's, its
    cgroup's (v1 or v2, read through /proc/self/cgroup) and what the kernel
    says is available. What the bf16 copy of the training set is held to
    (train_batch.c, trn__xh_limit).

    The pieces are pure (text and a root directory in, bytes out) so a test
    can run them against a fake cgroup tree. No allocation is returned;
    nothing is owned by the caller.
*/
#ifndef TRN_MEMLIMIT_H
#define TRN_MEMLIMIT_H

/* The smallest of the positive figures phys, cgroup and avail (bytes;
   <= 0: unknown, ignored), divided by div (>= 1), at most cap. cap when
   none is known. */
long trn_memlimit_pick(long phys, long cgroup, long avail, long div, long cap);

/* The memory limit of the cgroups named in cgroup_text (the text of
   /proc/self/cgroup) under root (the cgroup mount, "/sys/fs/cgroup"; a
   test passes a fake tree). cgroup v2 ("0::/p"): the smallest memory.max
   in root/p and each parent up to root ("max": none). v1 ("N:memory:/p",
   the controller alone or among others): the smallest
   memory.limit_in_bytes in root/memory/p and each parent up to
   root/memory (values of 2^63 - 4096 and above: unlimited); a container's
   view shows the host's path while its own limit sits at the mount's root,
   which the walk reaches. A path with a ".." component (a cgroup outside
   the namespace's root) reads root's own file alone. Every line is
   walked and the smallest limit taken; under systemd's hybrid layout
   (v1 controllers, v2 mounted at root/unified) the "0::" line is walked
   under root itself, where no memory.max lies, so only the v1 limit
   counts there (the memory controller is v1's in that layout). -1 when
   no limit is set or none can be read. */
long trn_memlimit_cgroup(const char *cgroup_text, const char *root);

/* This process: trn_memlimit_cgroup of the whole of /proc/self/cgroup
   under /sys/fs/cgroup (or the paths trn_memlimit_set_paths gave). -1
   when none or unreadable. */
long trn_memlimit_cgroup_self(void);

/* Tests: trn_memlimit_cgroup_self (and so the trainer's bf16 copy limit)
   reads cgroup_file under root instead; NULL restores the default of
   each. The strings are borrowed: they must outlive the use. Not
   thread-safe: set it before any trainer runs. */
void trn_memlimit_set_paths(const char *cgroup_file, const char *root);

/* MemAvailable from /proc/meminfo in bytes, -1 when unreadable. */
long trn_memlimit_available(void);

/* Physical memory in bytes (sysconf), LONG_MAX when unknown. */
long trn_memlimit_phys(void);

#endif
