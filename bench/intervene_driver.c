/*  intervene_driver.c - the client side of `make bench-intervene`: sends
    `trial_set` requests (lr = a new value each time) round-robin over the
    given running trials, each with "wait": the controller answers only
    once the trial has acknowledged, so the time from sending a request to
    its `ok` is the end-to-end latency of a live change (controller,
    SQLite commit, push to the trial, the trial's next poll, its ins_ack).
    One DEALER socket, like `jizhi trial set`, without a process per
    request. With --concurrency K, K requests are in flight at once.

    usage: intervene_driver --controller ENDPOINT [--requests N]
                            [--concurrency K] TRIAL_ID...
    Prints the median, p90, p99 and max latency, and the median latency
    the controller measured itself (push to acknowledgement).
*/
#include "common/keys.h"
#include "common/wire.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double s_pct(const double *sorted, long n, double p)
{
    long i = (long)(p * (double)(n - 1) + 0.5);
    return sorted[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static json_t *s_set_msg(long trial, long k)
{
    double lr = 0.001 * (double)(1 + k % 997);
    return json_pack("{s:s, s:I, s:{s:f}, s:b}", "type", "trial_set", "trial",
                     (json_int_t)trial, "values", "lr", lr, "wait", 1);
}

int main(int argc, char **argv)
{
    const char *ep = NULL;
    long nreq = 1000, conc = 1;
    long *ids = calloc((size_t)argc, sizeof *ids);
    long nids = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--controller") && i + 1 < argc)
            ep = argv[++i];
        else if (!strcmp(argv[i], "--requests") && i + 1 < argc)
            nreq = atol(argv[++i]);
        else if (!strcmp(argv[i], "--concurrency") && i + 1 < argc)
            conc = atol(argv[++i]);
        else
            ids[nids++] = atol(argv[i]);
    }
    if (!ep || nids == 0 || nreq <= 0 || conc <= 0) {
        fprintf(stderr, "usage: intervene_driver --controller ENDPOINT [--requests N] "
                        "[--concurrency K] TRIAL_ID...\n");
        return 2;
    }
    void *ctx = zmq_ctx_new();
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    wire_socket_setup(sock);
    char kerr[600];
    if (keys_client_setup(sock, ep, NULL, kerr, sizeof kerr) != 0) {
        fprintf(stderr, "%s\n", kerr);
        return 1;
    }
    if (zmq_connect(sock, ep) != 0) {
        fprintf(stderr, "cannot connect to %s: %s\n", ep, zmq_strerror(errno));
        return 1;
    }
    double *lat = calloc((size_t)nreq, sizeof *lat),
           *ctl = calloc((size_t)nreq, sizeof *ctl);
    long done = 0, nctl = 0, failed = 0;
    char err[256];
    double t0 = util_now();
    if (conc == 1) {
        for (long k = 0; k < nreq; k++) {
            double s = util_now();
            json_t *r =
                wire_request(sock, s_set_msg(ids[k % nids], k), 30000, err, sizeof err);
            double e = util_now();
            if (!r || strcmp(wire_type(r), "ok")) {
                const char *m =
                    r ? json_string_value(json_object_get(r, "message")) : err;
                fprintf(stderr, "request %ld (trial %ld) failed: %s\n", k, ids[k % nids],
                        m ? m : "error");
                failed++;
            } else {
                lat[done++] = e - s;
                json_t *l = json_object_get(r, "latency_s");
                if (json_is_number(l))
                    ctl[nctl++] = json_number_value(l);
            }
            json_decref(r);
        }
    } else {
        /* K in flight: requests carry their own req; replies are matched to it */
        double *sent = calloc((size_t)nreq, sizeof *sent);
        long next = 0, inflight = 0;
        while (done + failed < nreq) {
            while (inflight < conc && next < nreq) {
                json_t *m = s_set_msg(ids[next % nids], next);
                json_object_set_new(m, "req", json_integer(next + 1));
                sent[next] = util_now();
                if (wire_send(sock, NULL, m, 0) != 0) {
                    fprintf(stderr, "send failed: %s\n", zmq_strerror(errno));
                    return 1;
                }
                next++;
                inflight++;
            }
            zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
            if (zmq_poll(&item, 1, 30000) <= 0) {
                fprintf(stderr, "no reply within 30 s\n");
                return 1;
            }
            json_t *r;
            while ((r = wire_recv(sock, NULL, 1, err, sizeof err))) {
                long k = (long)json_integer_value(json_object_get(r, "req")) - 1;
                if (k >= 0 && k < next) {
                    inflight--;
                    if (strcmp(wire_type(r), "ok")) {
                        const char *m = json_string_value(json_object_get(r, "message"));
                        fprintf(stderr, "request %ld failed: %s\n", k, m ? m : "error");
                        failed++;
                    } else {
                        lat[done++] = util_now() - sent[k];
                        json_t *l = json_object_get(r, "latency_s");
                        if (json_is_number(l))
                            ctl[nctl++] = json_number_value(l);
                    }
                }
                json_decref(r);
            }
        }
        free(sent);
    }
    double wall = util_now() - t0;
    zmq_close(sock);
    zmq_ctx_term(ctx);
    if (done == 0) {
        fprintf(stderr, "no request succeeded\n");
        return 1;
    }
    qsort(lat, (size_t)done, sizeof *lat, s_cmp);
    qsort(ctl, (size_t)nctl, sizeof *ctl, s_cmp);
    printf("trial set x%ld over %ld trials, %ld in flight: median %.2f ms, p90 %.2f ms, "
           "p99 %.2f ms, max %.2f ms (%.0f sets/s); controller-measured push->ack median "
           "%.2f ms, "
           "p99 %.2f ms; %ld failed\n",
           done, nids, conc, s_pct(lat, done, 0.5) * 1e3, s_pct(lat, done, 0.9) * 1e3,
           s_pct(lat, done, 0.99) * 1e3, lat[done - 1] * 1e3, (double)done / wall,
           nctl ? s_pct(ctl, nctl, 0.5) * 1e3 : -1,
           nctl ? s_pct(ctl, nctl, 0.99) * 1e3 : -1, failed);
    free(lat);
    free(ctl);
    free(ids);
    return failed ? 1 : 0;
}
