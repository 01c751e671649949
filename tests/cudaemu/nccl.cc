/*  nccl.cc - cudaemu's NCCL (include/nccl.h) over MPI: each MPI rank is one
    emulated GPU, a communicator is a duplicate of MPI_COMM_WORLD (its
    traffic never mixes with the program's own MPI calls). NOT A GPU.

    Every call checks its arguments at once (NCCL's statuses: a NULL comm,
    a peer or root out of range, a bad datatype or op: ncclInvalidArgument)
    and its buffers with emu_need; the MPI work happens in an op enqueued on
    the call's stream (emu_enqueue), which reads device memory only when it
    runs. Inside ncclGroupStart/ncclGroupEnd the calls are collected and the
    outermost ncclGroupEnd enqueues one op that posts every send and
    receive (MPI_Isend/MPI_Irecv), runs the collectives in call order and
    waits for all; outside a group a call is a group of one. A send to
    oneself is paired with the receive from oneself of the same group (a
    copy), as NCCL needs.

    Sums: MPI_Allreduce with MPI_SUM (MPI's order, the same on every rank
    with Open MPI's algorithms; NCCL's order is unspecified either).
    Limits (each ends the process with "cudaemu: " and the reason): the
    types ncclChar, ncclFloat, ncclDouble and the op ncclSum only; one
    stream per group; nranks > 1 only under MPI (TRN_HAVE_MPI, MPI
    initialised, nranks == the world's size, rank == the world rank: else
    ncclCommInitRank returns ncclInvalidArgument); a receive whose size
    differs from the matching send's (NCCL needs the same count and type);
    an op that runs after ncclCommDestroy of its communicator. A destroyed
    communicator's struct is kept (never freed) so that such a use is seen.
    ncclCommDestroy first drains the streams that still hold its ops (NCCL
    waits for them as well).
*/
#include <nccl.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <utility>
#include <vector>

#include "emu.h"

#ifdef TRN_HAVE_MPI
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1 /* Open MPI's C++ bindings: not used */
#endif
#include <mpi.h>
#endif

struct ncclComm {
    int nranks, rank;
    int dev; /* the device current at ncclCommInitRank: its buffers' */
    int destroyed;
#ifdef TRN_HAVE_MPI
    MPI_Comm mc; /* MPI_COMM_NULL with one rank */
#endif
    std::map<cudaStream_t, long> pending; /* stream -> ops enqueued, not yet run */
};

namespace
{

/* buf: bytes of device memory of the communicator's device (or pinned) */
void s_need_buf(const ncclComm *comm, const void *buf, size_t bytes, const char *what)
{
    emu_need(buf, bytes, 1, what);
    int d = emu_device_of(buf);
    if (comm && d >= 0 && d != comm->dev)
        emu_fail("%s: memory of device %d, the communicator is on device %d", what, d,
                 comm->dev);
}

const char s_magic[] = "cudaemu-nccl-id";

enum Kind { K_ALLREDUCE, K_BCAST, K_SEND, K_RECV };
const char *const s_kind_name[] = {"ncclAllReduce", "ncclBroadcast", "ncclSend",
                                   "ncclRecv"};

struct Task {
    Kind kind;
    ncclComm *comm;
    cudaStream_t st;
    const void *sbuf; /* allreduce, bcast (root), send */
    void *rbuf;       /* allreduce, bcast, recv */
    size_t count, bytes;
    ncclDataType_t type;
    int root; /* bcast: the root; send, recv: the peer */
    int pair; /* a send to oneself: the index of its receive in the group */
};

/* the group state, per thread as in NCCL */
thread_local int s_depth;
thread_local ncclResult_t s_group_err = ncclSuccess;
thread_local std::vector<Task> s_group;

/* bytes per element of an emulated type; 0 for a type NCCL has that is not
   emulated; -1 for a value NCCL rejects */
int type_size(ncclDataType_t t)
{
    int v = (int)t;
    if (v < 0 || v >= 12) /* ncclNumTypes */
        return -1;
    if (v == ncclChar)
        return 1;
    if (v == ncclFloat)
        return 4;
    if (v == ncclDouble)
        return 8;
    return 0;
}

/* records a failed call's status for the enclosing group (NCCL's
   ncclGroupEnd returns it) */
ncclResult_t group_err(ncclResult_t r)
{
    if (s_depth > 0 && r != ncclSuccess)
        s_group_err = r;
    return r;
}

/* The checks NCCL makes at every call (CommCheck, ArgsCheck), then the
   emulator's own. */
ncclResult_t check_args(const char *what, ncclComm *comm, int root, ncclDataType_t type)
{
    if (!comm)
        return ncclInvalidArgument;
    if (comm->destroyed)
        emu_fail("%s: the communicator was destroyed (ncclCommDestroy)", what);
    if (root < 0 || root >= comm->nranks)
        return ncclInvalidArgument;
    int ts = type_size(type);
    if (ts < 0)
        return ncclInvalidArgument;
    if (ts == 0)
        emu_fail("%s: datatype %d is NCCL's but not emulated", what, (int)type);
    return ncclSuccess;
}

int overlap_partly(const void *a, const void *b, size_t bytes)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return bytes > 0 && x != y && x < y + bytes && y < x + bytes;
}

#ifdef TRN_HAVE_MPI
void mpi_check(int rc, const char *what, const char *call)
{
    if (rc == MPI_SUCCESS)
        return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    emu_fail("%s: %s failed: %s", what, call, msg);
}

MPI_Datatype mpi_type(ncclDataType_t t)
{
    return t == ncclFloat ? MPI_FLOAT : t == ncclDouble ? MPI_DOUBLE : MPI_SIGNED_CHAR;
}

/* the most elements or bytes one MPI call moves (its counts are ints) */
const size_t S_MPI_CHUNK = (size_t)1 << 28;

void run_collective(const Task &t)
{
    const char *what = s_kind_name[t.kind];
    ncclComm *c = t.comm;
    if (t.kind == K_ALLREDUCE) {
        int in_place = t.sbuf == t.rbuf;
        size_t es = (size_t)type_size(t.type);
        for (size_t off = 0; off < t.count; off += S_MPI_CHUNK) {
            size_t n = t.count - off < S_MPI_CHUNK ? t.count - off : S_MPI_CHUNK;
            const void *s = in_place ? MPI_IN_PLACE : (const char *)t.sbuf + off * es;
            mpi_check(MPI_Allreduce(s, (char *)t.rbuf + off * es, (int)n,
                                    mpi_type(t.type), MPI_SUM, c->mc),
                      what, "MPI_Allreduce");
        }
        return;
    }
    if (c->rank == t.root && t.sbuf != t.rbuf)
        memcpy(t.rbuf, t.sbuf, t.bytes);
    for (size_t off = 0; off < t.bytes; off += S_MPI_CHUNK) {
        size_t n = t.bytes - off < S_MPI_CHUNK ? t.bytes - off : S_MPI_CHUNK;
        mpi_check(MPI_Bcast((char *)t.rbuf + off, (int)n, MPI_BYTE, t.root, c->mc), what,
                  "MPI_Bcast");
    }
}

/* Posts t's messages (a zero-byte one for zero bytes: NCCL matches those
   too); rq gets the requests, rt the task index of each receive (-1 for a
   send) and rb the bytes each receive expects. */
void post_p2p(const Task &t, int i, std::vector<MPI_Request> &rq, std::vector<int> &rt,
              std::vector<size_t> &rb)
{
    const char *what = s_kind_name[t.kind];
    size_t off = 0;
    do {
        size_t n = t.bytes - off < S_MPI_CHUNK ? t.bytes - off : S_MPI_CHUNK;
        MPI_Request r;
        if (t.kind == K_SEND)
            mpi_check(MPI_Isend((const char *)t.sbuf + off, (int)n, MPI_BYTE, t.root, 0,
                                t.comm->mc, &r),
                      what, "MPI_Isend");
        else
            mpi_check(MPI_Irecv((char *)t.rbuf + off, (int)n, MPI_BYTE, t.root, 0,
                                t.comm->mc, &r),
                      what, "MPI_Irecv");
        rq.push_back(r);
        rt.push_back(t.kind == K_RECV ? i : -1);
        rb.push_back(n);
        off += n;
    } while (off < t.bytes);
}

void wait_p2p(const std::vector<Task> &tasks, std::vector<MPI_Request> &rq,
              const std::vector<int> &rt, const std::vector<size_t> &rb)
{
    if (rq.empty())
        return;
    std::vector<MPI_Status> ss(rq.size());
    int rc = MPI_Waitall((int)rq.size(), rq.data(), ss.data());
    if (rc != MPI_ERR_IN_STATUS)
        mpi_check(rc, "ncclSend/ncclRecv", "MPI_Waitall");
    for (size_t k = 0; k < rq.size(); k++) {
        if (rt[k] < 0)
            continue;
        const Task &t = tasks[(size_t)rt[k]];
        if (rc == MPI_ERR_IN_STATUS && ss[k].MPI_ERROR == MPI_ERR_TRUNCATE)
            emu_fail(
                "ncclRecv of %zu bytes from rank %d: the matching ncclSend is larger "
                "(NCCL needs the same count and datatype on both sides)",
                t.bytes, t.root);
        if (rc == MPI_ERR_IN_STATUS)
            mpi_check(ss[k].MPI_ERROR, "ncclRecv", "MPI_Waitall");
        int got = 0;
        MPI_Get_count(&ss[k], MPI_BYTE, &got);
        if ((size_t)got != rb[k])
            emu_fail(
                "ncclRecv of %zu bytes from rank %d: the matching ncclSend is smaller "
                "(NCCL needs the same count and datatype on both sides)",
                t.bytes, t.root);
    }
    if (rc == MPI_ERR_IN_STATUS) /* a send failed */
        for (size_t k = 0; k < rq.size(); k++)
            mpi_check(ss[k].MPI_ERROR == MPI_ERR_PENDING ? MPI_SUCCESS : ss[k].MPI_ERROR,
                      "ncclSend", "MPI_Waitall");
}
#endif

/* One rank's collective: a copy. */
void run_local(const Task &t)
{
    if (t.sbuf != t.rbuf && t.bytes > 0)
        memcpy(t.rbuf, t.sbuf, t.bytes);
}

/* The op of a group (runs when its stream reaches it). */
void run_group(const std::vector<Task> &tasks)
{
    for (const Task &t : tasks)
        if (t.comm->destroyed)
            emu_fail("%s runs after ncclCommDestroy of its communicator",
                     s_kind_name[t.kind]);
    for (const Task &t : tasks) /* sends to oneself */
        if (t.kind == K_SEND && t.pair >= 0 && t.bytes > 0)
            memcpy(tasks[(size_t)t.pair].rbuf, t.sbuf, t.bytes);
#ifdef TRN_HAVE_MPI
    std::vector<MPI_Request> rq;
    std::vector<int> rt;
    std::vector<size_t> rb;
    for (size_t i = 0; i < tasks.size(); i++) {
        const Task &t = tasks[i];
        if ((t.kind == K_SEND || t.kind == K_RECV) && t.root != t.comm->rank)
            post_p2p(t, (int)i, rq, rt, rb);
    }
#endif
    for (const Task &t : tasks) {
        if (t.kind != K_ALLREDUCE && t.kind != K_BCAST)
            continue;
        if (t.comm->nranks == 1) {
            run_local(t);
            continue;
        }
#ifdef TRN_HAVE_MPI
        run_collective(t);
#endif
    }
#ifdef TRN_HAVE_MPI
    wait_p2p(tasks, rq, rt, rb);
#endif
}

/* Pairs each send to oneself with the next unpaired receive from oneself
   on the same communicator, in call order (NCCL runs the calls to one peer
   in order); one left alone would hang NCCL. */
void pair_self(std::vector<Task> &tasks)
{
    std::vector<char> used(tasks.size(), 0);
    for (Task &s : tasks) {
        if (s.kind != K_SEND || s.root != s.comm->rank)
            continue;
        for (size_t j = 0; j < tasks.size(); j++) {
            const Task &r = tasks[j];
            if (used[j] || r.kind != K_RECV || r.comm != s.comm || r.root != r.comm->rank)
                continue;
            if (r.bytes != s.bytes)
                emu_fail(
                    "ncclSend of %zu bytes to itself (rank %d) meets an ncclRecv of %zu "
                    "bytes (NCCL needs the same count and datatype)",
                    s.bytes, s.root, r.bytes);
            used[j] = 1;
            s.pair = (int)j;
            break;
        }
        if (s.pair < 0)
            emu_fail(
                "ncclSend to itself (rank %d) without an ncclRecv from itself in the "
                "same group: NCCL would hang",
                s.root);
    }
    for (size_t j = 0; j < tasks.size(); j++)
        if (tasks[j].kind == K_RECV && tasks[j].root == tasks[j].comm->rank && !used[j])
            emu_fail(
                "ncclRecv from itself (rank %d) without an ncclSend to itself in the "
                "same group: NCCL would hang",
                tasks[j].root);
}

/* Enqueues a group's op on its stream. */
void flush(std::vector<Task> tasks)
{
    if (tasks.empty())
        return;
    cudaStream_t st = tasks[0].st;
    for (const Task &t : tasks)
        if (t.st != st)
            emu_fail("a group of NCCL calls on several streams is not emulated (%s)",
                     s_kind_name[t.kind]);
    pair_self(tasks);
    /* a recorded op (graph capture) runs at each launch: not pending */
    std::vector<ncclComm *> counted;
    if (!emu_capturing(st))
        for (const Task &t : tasks) {
            int seen = 0;
            for (ncclComm *c : counted)
                seen |= c == t.comm;
            if (!seen) {
                counted.push_back(t.comm);
                t.comm->pending[st]++;
            }
        }
    const char *what = tasks.size() == 1 ? s_kind_name[tasks[0].kind] : "ncclGroupEnd";
    emu_enqueue(st, what, [tasks, counted, st]() {
        run_group(tasks);
        for (ncclComm *c : counted)
            c->pending[st]--;
    });
}

ncclResult_t submit(const Task &t)
{
    if (s_depth > 0)
        s_group.push_back(t);
    else
        flush(std::vector<Task>(1, t));
    return ncclSuccess;
}

} // namespace

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error";
    case ncclSystemError:
        return "unhandled system error";
    case ncclInternalError:
        return "internal error";
    case ncclInvalidArgument:
        return "invalid argument";
    case ncclInvalidUsage:
        return "invalid usage";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    static unsigned s_serial;
    if (!uniqueId)
        return ncclInvalidArgument;
    memset(uniqueId, 0, sizeof *uniqueId);
    snprintf(uniqueId->internal, sizeof uniqueId->internal, "%s %ld %ld %u", s_magic,
             (long)getpid(), (long)time(NULL), ++s_serial);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    if (!comm)
        return ncclInvalidArgument;
    if (s_depth > 0)
        emu_fail("ncclCommInitRank inside ncclGroupStart/ncclGroupEnd is not emulated");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    if (strncmp(commId.internal, s_magic, sizeof s_magic - 1))
        emu_fail("ncclCommInitRank (rank %d of %d): the ncclUniqueId was not made by "
                 "ncclGetUniqueId (not passed on from rank 0?)",
                 rank, nranks);
    ncclComm *c = new ncclComm();
    c->nranks = nranks;
    c->dev = emu_current_device();
    c->rank = rank;
#ifdef TRN_HAVE_MPI
    c->mc = MPI_COMM_NULL;
#endif
    if (nranks > 1) {
#ifdef TRN_HAVE_MPI
        int init = 0, fin = 0, wsize = 0, wrank = 0;
        MPI_Initialized(&init);
        MPI_Finalized(&fin);
        if (!init || fin)
            emu_fail(
                "ncclCommInitRank: %d ranks need MPI (one MPI rank per emulated GPU), "
                "and MPI is not initialised",
                nranks);
        MPI_Comm_size(MPI_COMM_WORLD, &wsize);
        MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
        if (wsize != nranks || wrank != rank) {
            delete c;
            return ncclInvalidArgument;
        }
        mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &c->mc), "ncclCommInitRank",
                  "MPI_Comm_dup");
        MPI_Comm_set_errhandler(c->mc, MPI_ERRORS_RETURN);
        ncclUniqueId root = commId;
        mpi_check(MPI_Bcast(&root, (int)sizeof root, MPI_BYTE, 0, c->mc),
                  "ncclCommInitRank", "MPI_Bcast");
        if (memcmp(&root, &commId, sizeof root))
            emu_fail(
                "ncclCommInitRank: rank %d's ncclUniqueId differs from rank 0's (all "
                "ranks must pass the one rank 0 made)",
                rank);
#else
        emu_fail("ncclCommInitRank: %d ranks need MPI (built without TRN_HAVE_MPI)",
                 nranks);
#endif
    }
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    if (comm->destroyed)
        return ncclInvalidArgument; /* NCCL: "comm has already been destroyed" */
    /* NCCL waits for the communicator's work: run what is still queued */
    for (auto &p : comm->pending)
        if (p.second > 0)
            cudaStreamSynchronize(p.first);
    for (auto &p : comm->pending)
        if (p.second > 0)
            emu_fail("ncclCommDestroy: %ld operation(s) still queued on a stream after "
                     "synchronising it",
                     p.second);
    comm->destroyed = 1;
#ifdef TRN_HAVE_MPI
    int fin = 0;
    MPI_Finalized(&fin);
    if (comm->mc != MPI_COMM_NULL && !fin)
        MPI_Comm_free(&comm->mc);
#endif
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream)
{
    ncclResult_t r = check_args("ncclAllReduce", comm, 0, datatype);
    if (r != ncclSuccess)
        return group_err(r);
    int o = (int)op;
    if (o < 0 || o >= 5) /* ncclNumOps: no user-defined ops here */
        return group_err(ncclInvalidArgument);
    if (o != ncclSum)
        emu_fail("ncclAllReduce: reduction op %d is NCCL's but not emulated", o);
    if (count == 0)
        return ncclSuccess; /* NCCL drops empty collectives */
    size_t bytes = count * (size_t)type_size(datatype);
    s_need_buf(comm, sendbuff, bytes, "ncclAllReduce sendbuff");
    s_need_buf(comm, recvbuff, bytes, "ncclAllReduce recvbuff");
    if (overlap_partly(sendbuff, recvbuff, bytes))
        emu_fail("ncclAllReduce: sendbuff %p and recvbuff %p overlap without being equal "
                 "(in place needs sendbuff == recvbuff)",
                 sendbuff, recvbuff);
    Task t = {K_ALLREDUCE, comm,  stream,   sendbuff, recvbuff,
              count,       bytes, datatype, 0,        -1};
    return submit(t);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream)
{
    ncclResult_t r = check_args("ncclBroadcast", comm, root, datatype);
    if (r != ncclSuccess)
        return group_err(r);
    if (count == 0)
        return ncclSuccess;
    size_t bytes = count * (size_t)type_size(datatype);
    if (comm->rank == root) { /* the others' sendbuff is not read */
        s_need_buf(comm, sendbuff, bytes, "ncclBroadcast sendbuff");
        if (overlap_partly(sendbuff, recvbuff, bytes))
            emu_fail("ncclBroadcast: sendbuff %p and recvbuff %p overlap without being "
                     "equal (in place needs sendbuff == recvbuff)",
                     sendbuff, recvbuff);
    }
    s_need_buf(comm, recvbuff, bytes, "ncclBroadcast recvbuff");
    Task t = {K_BCAST, comm,  stream,   sendbuff, recvbuff,
              count,   bytes, datatype, root,     -1};
    return submit(t);
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                      int peer, ncclComm_t comm, cudaStream_t stream)
{
    ncclResult_t r = check_args("ncclSend", comm, peer, datatype);
    if (r != ncclSuccess)
        return group_err(r);
    size_t bytes = count * (size_t)type_size(datatype);
    if (bytes > 0)
        s_need_buf(comm, sendbuff, bytes, "ncclSend sendbuff");
    Task t = {K_SEND, comm, stream, sendbuff, NULL, count, bytes, datatype, peer, -1};
    return submit(t);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    ncclResult_t r = check_args("ncclRecv", comm, peer, datatype);
    if (r != ncclSuccess)
        return group_err(r);
    size_t bytes = count * (size_t)type_size(datatype);
    if (bytes > 0)
        s_need_buf(comm, recvbuff, bytes, "ncclRecv recvbuff");
    Task t = {K_RECV, comm, stream, NULL, recvbuff, count, bytes, datatype, peer, -1};
    return submit(t);
}

ncclResult_t ncclGroupStart(void)
{
    s_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (s_depth == 0)
        return ncclInvalidUsage; /* NCCL: "not in a group call" */
    if (--s_depth > 0)
        return ncclSuccess;
    std::vector<Task> tasks;
    tasks.swap(s_group);
    ncclResult_t r = s_group_err;
    s_group_err = ncclSuccess;
    if (r != ncclSuccess)
        return r; /* NCCL drops the group's calls */
    flush(std::move(tasks));
    return ncclSuccess;
}
