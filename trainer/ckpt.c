/*  ckpt.c - jizhi-train checkpoint files.

    Layout (little-endian):
        0   8  magic "JZTRNCK\0"
        8   4  version (1)
        12  4  byte-order marker 0x01020304
        16  8  payload length P
        24  P  payload
        24+P 4 CRC-32 (zlib) of bytes [0, 24+P)
    Payload: architecture text, optimiser kind, step/epoch/position, the
    optimiser's step count, RNG state, loss scaler(s), the restorable
    config as "name=value" lines (everything that may change live, plus the
    init-only seed, zero_gamma, loss_scale and per_layer_scale: how the run
    began; for the CNN conv_route=dnnl|gemm, the convolution path its run
    began on, which is not an option), then every param's
    master weights and optimiser moments by name,
    then BN running statistics, then (top-k runs) the ranks' compression
    state: tag "DIST", rank count R, floats per rank C, R x C floats
    gathered to rank 0 (each rank's residuals and momentum-correction
    velocities, dist.h). The section is optional: a checkpoint without it,
    or for another rank count or bucket layout, restores with the state
    zeroed (said on stderr). Everything is stored raw, so a round trip
    is bit-exact and a resumed run continues exactly as the uninterrupted
    one (the epoch's order is regenerated from seed and epoch).
    Load reads and checks the whole file (magic, version, length, checksum,
    architecture, sizes) before changing anything.
*/
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "trainer/train_impl.h"

#define CK_MAGIC "JZTRNCK"
#define CK_VERSION 1u
#define CK_BOM 0x01020304u
#define CK_HDR 24
#define CK_MAX ((size_t)1 << 34)
#define CK_DIST_TAG 0x54534944u /* "DIST" */

typedef struct {
    unsigned char *p;
    size_t len, cap;
    int oom;
} s_wbuf;

static void s_put(s_wbuf *b, const void *src, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1 << 16;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void s_u32(s_wbuf *b, uint32_t v)
{
    s_put(b, &v, 4);
}
static void s_u64(s_wbuf *b, uint64_t v)
{
    s_put(b, &v, 8);
}
static void s_f64(s_wbuf *b, double v)
{
    s_put(b, &v, 8);
}
static void s_str(s_wbuf *b, const char *s)
{
    uint32_t n = (uint32_t)strlen(s);
    s_u32(b, n);
    s_put(b, s, n);
}

typedef struct {
    const unsigned char *p;
    size_t len, off;
    int bad;
} s_rbuf;

static const void *s_get(s_rbuf *r, size_t n)
{
    if (r->bad || r->len - r->off < n) {
        r->bad = 1;
        return NULL;
    }
    const void *p = r->p + r->off;
    r->off += n;
    return p;
}

/* Copies the next n bytes into v (host order), or leaves v at its 0 when short. */
static void s_gval(s_rbuf *r, void *v, size_t n)
{
    const void *p = s_get(r, n);
    if (p)
        memcpy(v, p, n);
}
static uint32_t s_gu32(s_rbuf *r)
{
    uint32_t v = 0;
    s_gval(r, &v, sizeof v);
    return v;
}
static uint64_t s_gu64(s_rbuf *r)
{
    uint64_t v = 0;
    s_gval(r, &v, sizeof v);
    return v;
}
static double s_gf64(s_rbuf *r)
{
    double v = 0;
    s_gval(r, &v, sizeof v);
    return v;
}
/* Copies a length-prefixed string into buf (truncating). */
static void s_gstr(s_rbuf *r, char *buf, size_t cap)
{
    uint32_t n = s_gu32(r);
    const char *p = s_get(r, n);
    if (!p) {
        buf[0] = 0;
        return;
    }
    size_t k = n < cap - 1 ? n : cap - 1;
    memcpy(buf, p, k);
    buf[k] = 0;
}

static void s_sync_from_backend(trn_trainer *t)
{
    if (t->backend && t->backend_attached)
        t->backend->sync_to_host(t->backend->self, t->net);
}

/* Gathers every rank's compression state to rank 0 (collective; *all is
   NULL when there is none). -1 when a rank could not (all ranks agree). */
static int s_gather_dist(trn_trainer *t, float **all, long *count)
{
    *all = NULL;
    *count = t->dist ? trn_dist_state_count(t->dist) : 0;
    if (*count == 0)
        return 0;
    size_t bytes = (size_t)*count * sizeof(float);
    float *mine = malloc(bytes);
    float *buf = t->rank == 0 ? malloc(bytes * (size_t)t->nranks) : NULL;
    double bad = !mine || (t->rank == 0 && !buf);
    if (t->nranks > 1 && trn_comm_sum_d(t->comm, &bad, 1) < 0)
        bad = 1;
    if (bad) {
        free(mine);
        free(buf);
        return -1;
    }
    trn_dist_state_get(t->dist, mine);
    int rc = t->nranks > 1 ? trn_comm_gather(t->comm, mine, bytes, buf) : 0;
    if (t->nranks <= 1)
        memcpy(buf, mine, bytes);
    free(mine);
    if (rc < 0) {
        free(buf);
        return -1;
    }
    *all = buf;
    return 0;
}

/* The conv_route a checkpoint records: the CPU net's path where the rule
   chose it, else the route this run restored (cfg.conv_route, possibly
   none). Not the net's where the convolutions ran elsewhere (a backend:
   cuDNN) or the build had one path (no oneDNN): neither was a choice, and
   recording gemm would pin a later CPU or oneDNN resume to im2col. NULL
   for a model without convolutions or nothing to carry. */
static const char *s_saved_route(const trn_trainer *t)
{
    const char *route = trn_net_conv_route(t->net);
    if (route && (t->backend || !trn_net_conv_route_chosen(t->net)))
        route = t->cfg.conv_route[0] ? t->cfg.conv_route : NULL;
    return route;
}

int trn_trainer_save(trn_trainer *t, const char *path, char *err)
{
    float *dstate;
    long dcount;
    if (s_gather_dist(t, &dstate, &dcount) < 0) {
        snprintf(err, TRN_ERRLEN, "%s: out of memory gathering the ranks' top-k state",
                 path);
        return -1;
    }
    if (t->nranks > 1 && t->rank != 0) /* ranks hold the same state: rank 0 writes */
        return 0;
    s_sync_from_backend(t);
    s_wbuf b = {0};
    s_put(&b, CK_MAGIC, 8);
    s_u32(&b, CK_VERSION);
    s_u32(&b, CK_BOM);
    s_u64(&b, 0); /* payload length, patched below */
    trn_net *n = t->net;
    s_str(&b, trn_net_arch(n));
    s_u32(&b, (uint32_t)t->opt.kind);
    s_u64(&b, (uint64_t)t->step);
    s_u64(&b, (uint64_t)t->epoch);
    s_u64(&b, (uint64_t)t->pos);
    s_u64(&b, (uint64_t)t->opt.t);
    for (int i = 0; i < 4; i++)
        s_u64(&b, t->rng.s[i]);
    s_f64(&b, t->scaler.scale);
    s_u64(&b, (uint64_t)t->scaler.good_steps);
    s_u64(&b, (uint64_t)t->scaler.skipped);
    s_u32(&b, (uint32_t)t->nlayers);
    for (int l = 0; l < t->nlayers; l++) {
        s_f64(&b, t->lscalers[l].scale);
        s_u64(&b, (uint64_t)t->lscalers[l].good_steps);
    }
    /* The options that shape the trajectory (OPT_RESTORED in config.c). */
    char cfgtext[8192];
    size_t cl = trn_config_restored_text(&t->cfg, cfgtext, sizeof cfgtext);
    /* the CNN's convolution path, chosen once when its run began: a resume
       rebuilds that layout (trn__net_conv_route), whatever precision the
       run had reached */
    const char *route = s_saved_route(t);
    int fits = cl + 1 < sizeof cfgtext;
    if (fits && route) {
        size_t rl =
            (size_t)snprintf(cfgtext + cl, sizeof cfgtext - cl, "conv_route=%s\n", route);
        fits = cl + rl + 1 < sizeof cfgtext;
    }
    if (!fits) { /* never silently: a resume would lose options or its path */
        free(b.p);
        free(dstate);
        snprintf(err, TRN_ERRLEN,
                 "%s: the checkpoint's config text is over %zu bytes: not written", path,
                 sizeof cfgtext - 1);
        return -1;
    }
    s_str(&b, cfgtext);
    s_u32(&b, (uint32_t)trn_net_nparams(n));
    for (int i = 0; i < trn_net_nparams(n); i++) {
        trn_param *p = trn_net_param(n, i);
        s_str(&b, p->name);
        s_u64(&b, (uint64_t)p->n);
        s_put(&b, p->w, (size_t)p->n * sizeof(float));
        s_put(&b, p->m, (size_t)p->n * sizeof(float));
        s_put(&b, p->v, (size_t)p->n * sizeof(float));
    }
    s_u64(&b, (uint64_t)trn_net_state_count(n));
    s_put(&b, trn_net_state(n), (size_t)trn_net_state_count(n) * sizeof(float));
    if (dstate) {
        s_u32(&b, CK_DIST_TAG);
        s_u32(&b, (uint32_t)t->nranks);
        s_u64(&b, (uint64_t)dcount);
        s_put(&b, dstate, (size_t)dcount * sizeof(float) * (size_t)t->nranks);
        free(dstate);
    }
    if (b.oom) {
        free(b.p);
        snprintf(err, TRN_ERRLEN, "%s: out of memory writing the checkpoint", path);
        return -1;
    }
    uint64_t plen = b.len - CK_HDR;
    memcpy(b.p + 16, &plen, 8);
    uint32_t crc = (uint32_t)crc32_z(crc32(0L, Z_NULL, 0), b.p, b.len);
    s_u32(&b, crc);
    if (b.oom) {
        free(b.p);
        snprintf(err, TRN_ERRLEN, "%s: out of memory writing the checkpoint", path);
        return -1;
    }
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        snprintf(err, TRN_ERRLEN, "%s: cannot write: %s", path, strerror(errno));
        free(b.p);
        return -1;
    }
    int ok = fwrite(b.p, 1, b.len, f) == b.len;
    ok = fflush(f) == 0 && ok;
    ok = fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    free(b.p);
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, TRN_ERRLEN, "%s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

unsigned char *trn_ckpt_read(const char *path, size_t *len, char *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, TRN_ERRLEN, "%s: cannot open checkpoint: %s", path,
                 strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        snprintf(err, TRN_ERRLEN, "%s: is a directory, not a checkpoint file", path);
        return NULL;
    }
    unsigned char hdr[CK_HDR];
    size_t got = fread(hdr, 1, CK_HDR, f);
    if (got < CK_HDR && ferror(f)) {
        int e = errno;
        fclose(f);
        snprintf(err, TRN_ERRLEN, "%s: cannot read checkpoint: %s", path, strerror(e));
        return NULL;
    }
    if (got < 8 || memcmp(hdr, CK_MAGIC, 8) != 0) {
        fclose(f);
        snprintf(err, TRN_ERRLEN, "%s: not a jizhi-train checkpoint (bad magic)", path);
        return NULL;
    }
    if (got < CK_HDR) {
        fclose(f);
        snprintf(err, TRN_ERRLEN, "%s: truncated checkpoint (header is %zu of %d bytes)",
                 path, got, CK_HDR);
        return NULL;
    }
    uint32_t ver, bom;
    uint64_t plen;
    memcpy(&ver, hdr + 8, 4);
    memcpy(&bom, hdr + 12, 4);
    memcpy(&plen, hdr + 16, 8);
    if (bom != CK_BOM) {
        fclose(f);
        snprintf(err, TRN_ERRLEN, "%s: checkpoint written with another byte order", path);
        return NULL;
    }
    if (ver != CK_VERSION) {
        fclose(f);
        snprintf(err, TRN_ERRLEN,
                 "%s: checkpoint version %u, this jizhi-train reads version %u", path,
                 ver, CK_VERSION);
        return NULL;
    }
    if (plen > CK_MAX) {
        fclose(f);
        snprintf(err, TRN_ERRLEN, "%s: corrupt checkpoint (payload length %llu)", path,
                 (unsigned long long)plen);
        return NULL;
    }
    size_t total = CK_HDR + (size_t)plen + 4;
    /* A header that claims more than the file holds is refused before the
       allocation (a corrupt length would otherwise ask for up to CK_MAX). */
    if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) &&
        (uint64_t)sb.st_size < (uint64_t)total) {
        fclose(f);
        snprintf(err, TRN_ERRLEN, "%s: truncated checkpoint (%llu of %zu bytes)", path,
                 (unsigned long long)sb.st_size, total);
        return NULL;
    }
    unsigned char *buf = malloc(total);
    if (!buf) {
        fclose(f);
        snprintf(err, TRN_ERRLEN, "%s: out of memory reading the checkpoint", path);
        return NULL;
    }
    memcpy(buf, hdr, CK_HDR);
    size_t rest = fread(buf + CK_HDR, 1, total - CK_HDR, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (rest < total - CK_HDR) {
        snprintf(err, TRN_ERRLEN, "%s: truncated checkpoint (%zu of %zu bytes)", path,
                 CK_HDR + rest, total);
        free(buf);
        return NULL;
    }
    if (extra) {
        snprintf(err, TRN_ERRLEN, "%s: corrupt checkpoint (trailing bytes)", path);
        free(buf);
        return NULL;
    }
    uint32_t crc, want = (uint32_t)crc32_z(crc32(0L, NULL, 0), buf, total - 4);
    memcpy(&crc, buf + total - 4, 4);
    if (crc != want) {
        snprintf(err, TRN_ERRLEN, "%s: corrupt checkpoint (checksum mismatch)", path);
        free(buf);
        return NULL;
    }
    *len = total;
    return buf;
}

int trn_ckpt_verify(const char *path, char *err)
{
    size_t len;
    unsigned char *b = trn_ckpt_read(path, &len, err);
    free(b);
    return b ? 0 : -1;
}

static const char *s_opt_name(uint32_t k)
{
    static const char *const names[] = {"sgd", "lars", "lamb", "adamw"};
    return k < 4 ? names[k] : "?";
}

/* The payload's head, up to and including the config text (pointers into
   the file's bytes). */
typedef struct {
    char arch[256];
    uint32_t opt_kind;
    long step, epoch, pos, opt_t;
    trn_rng rng;
    double scale;
    long good, skipped;
    uint32_t nl;             /* layer scalers */
    const unsigned char *ls; /* nl x (f64 scale, u64 good steps), unaligned */
    const char *cfgtext;     /* cl bytes of "name=value\n" lines */
    uint32_t cl;
} s_head;

static void s_read_head(s_rbuf *r, s_head *h)
{
    s_gstr(r, h->arch, sizeof h->arch);
    h->opt_kind = s_gu32(r);
    h->step = (long)s_gu64(r);
    h->epoch = (long)s_gu64(r);
    h->pos = (long)s_gu64(r);
    h->opt_t = (long)s_gu64(r);
    for (int i = 0; i < 4; i++)
        h->rng.s[i] = s_gu64(r);
    h->scale = s_gf64(r);
    h->good = (long)s_gu64(r);
    h->skipped = (long)s_gu64(r);
    h->nl = s_gu32(r);
    h->ls = h->nl <= (r->len - r->off) / 16 ? s_get(r, (size_t)h->nl * 16) : NULL;
    if (!h->ls)
        r->bad = 1;
    h->cl = s_gu32(r);
    h->cfgtext = s_get(r, h->cl);
}

/* Sets each "name=value" line of a checkpoint's config text on c. 0, or -1
   with err. */
static int s_apply_cfgtext(trn_config *c, const char *text, size_t len, const char *path,
                           char *err)
{
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eq = memchr(p, '=', (size_t)((nl ? nl : end) - p));
        if (!nl || !eq) {
            snprintf(err, TRN_ERRLEN, "%s: corrupt checkpoint (config text)", path);
            return -1;
        }
        char name[64], val[512], e2[TRN_ERRLEN];
        size_t kn = (size_t)(eq - p), vn = (size_t)(nl - eq - 1);
        if (kn >= sizeof name || vn >= sizeof val) {
            snprintf(err, TRN_ERRLEN, "%s: corrupt checkpoint (config text)", path);
            return -1;
        }
        memcpy(name, p, kn);
        name[kn] = 0;
        memcpy(val, eq + 1, vn);
        val[vn] = 0;
        if (!strcmp(name, "conv_route")) { /* not an option: the net's path */
            if (strcmp(val, "dnnl") && strcmp(val, "gemm")) {
                snprintf(err, TRN_ERRLEN, "%.200s: checkpoint config: conv_route=%.40s",
                         path, val);
                return -1;
            }
            memcpy(c->conv_route, val, strlen(val) + 1); /* 5 bytes at most */
        } else if (trn_config_set(c, name, val, e2) == -1) {
            snprintf(err, TRN_ERRLEN, "%.200s: checkpoint config: %.280s", path, e2);
            return -1;
        }
        p = nl + 1;
    }
    return 0;
}

int trn_ckpt_read_config(const char *path, trn_config *c, char *err)
{
    size_t len;
    unsigned char *buf = trn_ckpt_read(path, &len, err);
    if (!buf)
        return -1;
    int rc = trn_ckpt_config_buf(buf, len, path, c, err);
    free(buf);
    return rc;
}

int trn_ckpt_config_buf(const unsigned char *buf, size_t len, const char *path,
                        trn_config *c, char *err)
{
    s_rbuf r = {buf, len - 4, CK_HDR, 0};
    s_head h;
    s_read_head(&r, &h);
    trn_config n = *c;
    int rc = -1;
    if (r.bad)
        snprintf(err, TRN_ERRLEN, "%s: corrupt checkpoint (payload does not parse)",
                 path);
    else if (s_apply_cfgtext(&n, h.cfgtext, h.cl, path, err) == 0) {
        char e2[TRN_ERRLEN];
        if (trn_config_validate(&n, e2) == 0)
            rc = 0;
        else
            snprintf(err, TRN_ERRLEN, "%.200s: checkpoint config: %.280s", path, e2);
    }
    if (rc == 0)
        *c = n;
    return rc;
}

size_t trn_ckpt_kept_options(const trn_config *was, const trn_config *now, char *buf,
                             size_t len)
{
    char a[8192], b[8192];
    size_t w = 0;
    buf[0] = 0;
    trn_config_restored_text(was, a, sizeof a);
    trn_config_restored_text(now, b, sizeof b);
    /* both texts list the same options in the same order */
    for (char *pa = a, *pb = b; *pa && *pb;) {
        char *ea = strchr(pa, '\n'), *eb = strchr(pb, '\n');
        if (!ea || !eb)
            break;
        *ea = *eb = 0;
        char *qa = strchr(pa, '='), *qb = strchr(pb, '=');
        if (qa && qb) {
            *qb = 0;
            if (!trn_config_is_live(pb) && strcmp(qa + 1, qb + 1) && w + 1 < len)
                w += (size_t)snprintf(buf + w, len - w, "%s%s=%s (this command: %s)",
                                      w ? ", " : "", pb, qb + 1, qa + 1);
        }
        pa = ea + 1;
        pb = eb + 1;
    }
    return w < len ? w : len - 1;
}

/* Parses the payload; with commit = 0 only checks it. */
static int s_parse(trn_trainer *t, const unsigned char *buf, size_t len, int commit,
                   const char *path, char *err)
{
    s_rbuf r = {buf, len - 4, CK_HDR, 0};
    trn_net *n = t->net;
    s_head h;
    s_read_head(&r, &h);
    if (!r.bad && strcmp(h.arch, trn_net_arch(n)) != 0) {
        snprintf(err, TRN_ERRLEN, "%s: checkpoint is for model %s, this run builds %s",
                 path, h.arch, trn_net_arch(n));
        return -1;
    }
    if (!r.bad && h.opt_kind != (uint32_t)t->opt.kind) {
        snprintf(err, TRN_ERRLEN,
                 "%s: checkpoint was trained with optimizer %s, this run uses %s", path,
                 s_opt_name(h.opt_kind), s_opt_name((uint32_t)t->opt.kind));
        return -1;
    }
    long step = h.step, epoch = h.epoch, pos = h.pos;
    if (!r.bad && h.nl != (uint32_t)t->nlayers) {
        snprintf(err, TRN_ERRLEN, "%s: corrupt checkpoint (layer count %u)", path, h.nl);
        return -1;
    }
    for (uint32_t l = 0; l < h.nl && !r.bad && commit; l++) {
        double ls;
        uint64_t lg;
        memcpy(&ls, h.ls + 16 * l, 8);
        memcpy(&lg, h.ls + 16 * l + 8, 8);
        t->lscalers[l].scale = ls;
        t->lscalers[l].good_steps = (long)lg;
        t->lscale[l] = ls;
    }
    trn_config c = t->cfg;
    if (h.cfgtext && s_apply_cfgtext(&c, h.cfgtext, h.cl, path, err) < 0)
        return -1;
    uint32_t np = s_gu32(&r);
    if (!r.bad && np != (uint32_t)trn_net_nparams(n)) {
        snprintf(err, TRN_ERRLEN, "%s: checkpoint has %u tensors, the model %d", path, np,
                 trn_net_nparams(n));
        return -1;
    }
    for (uint32_t i = 0; i < np && !r.bad; i++) {
        trn_param *p = trn_net_param(n, (int)i);
        char name[64];
        s_gstr(&r, name, sizeof name);
        uint64_t cnt = s_gu64(&r);
        if (!r.bad && (strcmp(name, p->name) || cnt != (uint64_t)p->n)) {
            snprintf(err, TRN_ERRLEN, "%s: tensor %u is %s[%llu], the model has %s[%ld]",
                     path, i, name, (unsigned long long)cnt, p->name, p->n);
            return -1;
        }
        size_t bytes = (size_t)p->n * sizeof(float);
        const void *w = s_get(&r, bytes), *m = s_get(&r, bytes), *v = s_get(&r, bytes);
        if (commit && !r.bad) {
            memcpy(p->w, w, bytes);
            memcpy(p->m, m, bytes);
            memcpy(p->v, v, bytes);
        }
    }
    uint64_t ns = s_gu64(&r);
    if (!r.bad && ns != (uint64_t)trn_net_state_count(n)) {
        snprintf(err, TRN_ERRLEN, "%s: corrupt checkpoint (state size %llu)", path,
                 (unsigned long long)ns);
        return -1;
    }
    const void *st = s_get(&r, (size_t)ns * sizeof(float));
    uint32_t dranks = 0;
    uint64_t dcount = 0;
    const unsigned char *dstate = NULL;
    if (!r.bad && r.off < r.len) { /* the ranks' compression state */
        uint32_t tag = s_gu32(&r);
        dranks = s_gu32(&r);
        dcount = s_gu64(&r);
        if (!r.bad && (tag != CK_DIST_TAG || dranks == 0 ||
                       dcount > CK_MAX / sizeof(float) / dranks)) {
            snprintf(err, TRN_ERRLEN, "%s: corrupt checkpoint (rank state section)",
                     path);
            return -1;
        }
        dstate = s_get(&r, (size_t)dcount * sizeof(float) * dranks);
    }
    if (r.bad || r.off != r.len) {
        snprintf(err, TRN_ERRLEN, "%s: corrupt checkpoint (payload does not parse)",
                 path);
        return -1;
    }
    if (epoch < 0 || pos < 0 || pos > t->train->n || step < 0) {
        snprintf(err, TRN_ERRLEN,
                 "%s: checkpoint position (epoch %ld, sample %ld) does not fit "
                 "this training set of %d",
                 path, epoch, pos, t->train->n);
        return -1;
    }
    if (trn_config_validate(&c, err) < 0)
        return -1;
    if (!commit)
        return 0;
    if (ns)
        memcpy(trn_net_state(n), st, (size_t)ns * sizeof(float));
    if (t->dist) {
        long want = trn_dist_state_count(t->dist);
        if (dstate && dranks == (uint32_t)t->nranks && dcount == (uint64_t)want) {
            /* unaligned in the buffer: copy through a float array */
            float *mine = malloc((size_t)want * sizeof(float) + 1);
            if (mine) {
                memcpy(mine, dstate + (size_t)t->rank * want * sizeof(float),
                       (size_t)want * sizeof(float));
                trn_dist_state_set(t->dist, mine, want);
                free(mine);
            } else {
                trn_dist_state_clear(t->dist);
            }
        } else {
            trn_dist_state_clear(t->dist);
            if (want > 0 && t->rank == 0 && !t->cfg.quiet)
                fprintf(stderr,
                        "jizhi-train: %s: no top-k state for %d ranks of this layout in "
                        "the checkpoint: residuals start from zero\n",
                        path, t->nranks);
        }
    }
    t->cfg = c;
    trn__apply_config(t);
    t->step = step;
    t->epoch = (int)epoch;
    t->pos = pos;
    if (t->pos >= t->train->n) {
        t->epoch++;
        t->pos = 0;
    }
    t->opt.t = h.opt_t;
    t->rng = h.rng;
    t->scaler.scale = h.scale;
    t->scaler.good_steps = h.good;
    t->scaler.skipped = h.skipped;
    /* dynamic or not as the checkpoint's config says (--loss-scale auto:
       its precision), not as this run's was before the load */
    trn__scalers_follow_config(t);
    t->perm_epoch = -1;
    t->prec = t->psched.n ? trn_prec_schedule_at(&t->psched, t->epoch)
                          : trn_precision_from_name(t->cfg.precision);
    trn_net_set_precision(n, t->prec);
    if (t->backend && t->backend_attached) {
        if (t->backend->detach)
            t->backend->detach(t->backend->self);
        t->backend_attached = 0;
    }
    return 0;
}

int trn_trainer_load_buf(trn_trainer *t, const unsigned char *buf, size_t len,
                         const char *path, char *err)
{
    int rc = s_parse(t, buf, len, 0, path, err);
    if (rc == 0)
        rc = s_parse(t, buf, len, 1, path, err);
    return rc;
}

int trn_trainer_load(trn_trainer *t, const char *path, char *err)
{
    size_t len;
    unsigned char *buf = trn_ckpt_read(path, &len, err);
    if (!buf)
        return -1;
    int rc = trn_trainer_load_buf(t, buf, len, path, err);
    free(buf);
    return rc;
}
