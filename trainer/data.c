/*  data.c - training data: Fashion-MNIST from Debian's dataset-fashion-mnist
    (IDX files, gzip, read with zlib) and a synthetic generator for tests.

    The training images (47 MB once decompressed, a third of a second of
    gunzip at every start) are read from a decompressed copy when one is
    in the cache directory (--data-cache): the first start writes it
    (atomically: a temporary file renamed), named after the .gz's name,
    size and modification time, so a changed file is never read stale;
    a copy that cannot be read is passed over for the .gz. A copy is
    mapped, not read: only the pages of the examples kept are touched (a
    20 000-example subset about a third of the file), with no copy into
    fresh memory.

    Images are normalised with the Fashion-MNIST mean/std. The validation
    split is the last --val-size examples of the official training set after
    a fixed shuffle (seed independent of --seed, so every trial of a study
    validates on the same examples); the official t10k set is the test set.
*/
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/util.h"
#include "trainer/align.h"
#include "trainer/gather.h"
#include "trainer/trn.h"

#define FMNIST_MEAN 0.2860f
#define FMNIST_STD 0.3530f
#define SPLIT_SEED 0x6a697a6869ULL

static void s_err(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, TRN_ERRLEN, fmt, ap);
    va_end(ap);
}

/* Reads exactly len bytes; returns 0 or -1 with err. */
static int s_read(gzFile f, void *buf, size_t len, const char *path, const char *what,
                  char *err)
{
    size_t got = 0;
    while (got < len) {
        unsigned chunk = len - got > (1u << 30) ? (1u << 30) : (unsigned)(len - got);
        int r = gzread(f, (char *)buf + got, chunk);
        if (r < 0) {
            int zerr;
            const char *m = gzerror(f, &zerr);
            s_err(err, "%s: corrupt gzip data while reading %s (%s)", path, what, m);
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    if (got < len) {
        s_err(err, "%s: truncated: %s needs %zu bytes, file has %zu", path, what, len,
              got);
        return -1;
    }
    return 0;
}

static uint32_t s_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Opens an IDX file and checks its magic; returns dims in d[]. */
static gzFile s_open_idx(const char *path, int want_dims, uint32_t *d, char *err)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        s_err(err,
              "%s: cannot open: %s (install dataset-fashion-mnist or pass --data-dir)",
              path, errno ? strerror(errno) : "out of memory");
        return NULL;
    }
    unsigned char hdr[16];
    if (s_read(f, hdr, 4 + 4 * (size_t)want_dims, path, "the IDX header", err) < 0) {
        gzclose(f);
        return NULL;
    }
    uint32_t magic = s_be32(hdr);
    uint32_t want = 0x800u | (uint32_t)want_dims;
    if (magic != want) {
        s_err(err, "%s: not an IDX %s file (magic 0x%08x, expected 0x%08x)", path,
              want_dims == 3 ? "image" : "label", magic, want);
        gzclose(f);
        return NULL;
    }
    for (int i = 0; i < want_dims; i++)
        d[i] = s_be32(hdr + 4 + 4 * i);
    return f;
}

/* The normalised value of each pixel byte: the same float operations as
   per pixel, done 256 times instead of once per pixel. */
static void s_lut(float lut[256])
{
    for (int v = 0; v < 256; v++)
        lut[v] = ((float)v / 255.0f - FMNIST_MEAN) / FMNIST_STD;
}

/* Reads an IDX image/label pair into ds's shape and labels and *raw (the
   pixel bytes, caller frees); ds->x stays NULL. 0, or -1 with err. */
static int s_load_raw(trn_dataset *ds, unsigned char **rawp, const char *images,
                      const char *labels, char *err)
{
    memset(ds, 0, sizeof *ds);
    *rawp = NULL;
    uint32_t di[3], dl[1];
    gzFile fi = s_open_idx(images, 3, di, err);
    if (!fi)
        return -1;
    gzFile fl = s_open_idx(labels, 1, dl, err);
    if (!fl) {
        gzclose(fi);
        return -1;
    }
    int rc = -1;
    unsigned char *raw = NULL;
    if (di[0] == 0 || di[0] > 10000000 || di[1] == 0 || di[1] > 1024 || di[2] == 0 ||
        di[2] > 1024) {
        s_err(err, "%s: corrupt: implausible dimensions %u x %u x %u", images, di[0],
              di[1], di[2]);
        goto out;
    }
    if (dl[0] != di[0]) {
        s_err(err, "%s: has %u labels but %s has %u images", labels, dl[0], images,
              di[0]);
        goto out;
    }
    ds->n = (int)di[0];
    ds->c = 1;
    ds->h = (int)di[1];
    ds->w = (int)di[2];
    ds->dim = ds->h * ds->w;
    ds->classes = 10;
    size_t npix = (size_t)ds->n * ds->dim;
    raw = malloc(npix);
    ds->y = malloc((size_t)ds->n);
    if (!raw || !ds->y) {
        s_err(err, "out of memory loading %s", images);
        goto out;
    }
    if (s_read(fi, raw, npix, images, "the pixels", err) < 0)
        goto out;
    if (s_read(fl, ds->y, (size_t)ds->n, labels, "the labels", err) < 0)
        goto out;
    for (int i = 0; i < ds->n; i++)
        if (ds->y[i] >= 10) {
            s_err(err, "%s: corrupt: label %d of example %d is not in 0..9", labels,
                  ds->y[i], i);
            goto out;
        }
    rc = 0;
out:
    gzclose(fi);
    gzclose(fl);
    if (rc < 0) {
        free(raw);
        trn_data_free(ds);
    } else
        *rawp = raw;
    return rc;
}

/* ---- the decompressed copies (--data-cache) ---- */

/* The cache directory of c: NULL for "off" or when no default can be
   found; else buf. */
static const char *s_cache_dir(const trn_config *c, char *buf, size_t size)
{
    if (!strcmp(c->data_cache, "off"))
        return NULL;
    if (c->data_cache[0])
        return c->data_cache;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && *xdg)
        n = snprintf(buf, size, "%s/jizhi-train", xdg);
    else if (home && *home)
        n = snprintf(buf, size, "%s/.cache/jizhi-train", home);
    else
        return NULL;
    return n > 0 && (size_t)n < size ? buf : NULL;
}

/* The copy's path for gz in dir: its name, size and modification time
   (a changed file gets another name). 0, or -1 when gz cannot be
   stat'ed or the path is too long. */
static int s_cache_path(const char *dir, const char *gz, char *out, size_t size)
{
    struct stat st;
    if (!dir || stat(gz, &st) != 0)
        return -1;
    const char *base = strrchr(gz, '/');
    base = base ? base + 1 : gz;
    int n =
        snprintf(out, size, "%s/%s-%lld-%lld.%09ld.idx", dir, base, (long long)st.st_size,
                 (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
    return n > 0 && (size_t)n < size ? 0 : -1;
}

static void s_be32_put(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Writes ds's images (raw) as an uncompressed IDX file at path, through a
   temporary file renamed into place (readers see the whole file or
   none). Best effort: a failure leaves nothing behind and is not an
   error (the next start decompresses again). */
static void s_cache_write(const char *dir, const char *path, const trn_dataset *ds,
                          const unsigned char *raw)
{
    if (util_mkdirs(dir, 0755) != 0)
        return;
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return;
    unsigned char hdr[16];
    s_be32_put(hdr, 0x803u);
    s_be32_put(hdr + 4, (uint32_t)ds->n);
    s_be32_put(hdr + 8, (uint32_t)ds->h);
    s_be32_put(hdr + 12, (uint32_t)ds->w);
    size_t npix = (size_t)ds->n * ds->dim;
    int ok =
        fwrite(hdr, 1, sizeof hdr, f) == sizeof hdr && fwrite(raw, 1, npix, f) == npix;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0)
        unlink(tmp);
}

/* Frees what s_load_raw_cached returned: raw read into the heap
   (maplen 0) or mapped (raw is 16 bytes into a mapping of maplen). */
static void s_raw_free(unsigned char *raw, size_t maplen)
{
    if (maplen)
        munmap(raw - 16, maplen);
    else
        free(raw);
}

/* s_load_raw with the images from the uncompressed IDX copy at path,
   mapped read-only (*maplen its length). 0, or -1 with err. */
static int s_load_raw_mapped(trn_dataset *ds, unsigned char **rawp, size_t *maplen,
                             const char *path, const char *labels, char *err)
{
    memset(ds, 0, sizeof *ds);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        s_err(err, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    unsigned char *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size >= 16)
        m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        s_err(err, "%s: cannot map", path);
        return -1;
    }
    size_t len = (size_t)st.st_size;
    uint32_t n = s_be32(m + 4), h = s_be32(m + 8), w = s_be32(m + 12);
    if (s_be32(m) != 0x803u || n == 0 || n > 10000000 || h == 0 || h > 1024 || w == 0 ||
        w > 1024 || len != 16 + (size_t)n * h * w) {
        s_err(err, "%s: not a whole IDX image file", path);
        munmap(m, len);
        return -1;
    }
    uint32_t dl[1];
    gzFile fl = s_open_idx(labels, 1, dl, err);
    if (!fl) {
        munmap(m, len);
        return -1;
    }
    int rc = -1;
    if (dl[0] != n) {
        s_err(err, "%s: has %u labels but %s has %u images", labels, dl[0], path, n);
        goto out;
    }
    ds->n = (int)n;
    ds->c = 1;
    ds->h = (int)h;
    ds->w = (int)w;
    ds->dim = ds->h * ds->w;
    ds->classes = 10;
    ds->y = malloc(n);
    if (!ds->y) {
        s_err(err, "out of memory loading %s", labels);
        goto out;
    }
    if (s_read(fl, ds->y, n, labels, "the labels", err) < 0)
        goto out;
    for (uint32_t i = 0; i < n; i++)
        if (ds->y[i] >= 10) {
            s_err(err, "%s: corrupt: label %d of example %u is not in 0..9", labels,
                  ds->y[i], i);
            goto out;
        }
    rc = 0;
out:
    gzclose(fl);
    if (rc < 0) {
        munmap(m, len);
        trn_data_free(ds);
        return -1;
    }
    madvise(m, len, MADV_RANDOM); /* the examples kept, not read-ahead of all */
    *rawp = m + 16;
    *maplen = len;
    return 0;
}

/* s_load_raw, the images from their decompressed copy in dir (NULL: no
   cache) when there is a readable one (mapped: *maplen > 0, see
   s_raw_free), else from the .gz, which then leaves its copy there. */
static int s_load_raw_cached(trn_dataset *ds, unsigned char **rawp, size_t *maplen,
                             const char *images, const char *labels, const char *dir,
                             char *err)
{
    char copy[1024];
    *maplen = 0;
    if (s_cache_path(dir, images, copy, sizeof copy) != 0)
        return s_load_raw(ds, rawp, images, labels, err);
    char ignored[TRN_ERRLEN];
    if (access(copy, R_OK) == 0 &&
        s_load_raw_mapped(ds, rawp, maplen, copy, labels, ignored) == 0)
        return 0;
    if (s_load_raw(ds, rawp, images, labels, err) < 0)
        return -1;
    s_cache_write(dir, copy, ds, *rawp);
    return 0;
}

/* Example si of the raw set src (pixels raw) into example di of dst,
   normalised through lut. */
static void s_convert(trn_dataset *dst, int di, const trn_dataset *src,
                      const unsigned char *raw, int si, const float lut[256])
{
    const unsigned char *in = raw + (size_t)si * src->dim;
    float *out = dst->x + (size_t)di * dst->dim;
    for (int j = 0; j < src->dim; j++)
        out[j] = lut[in[j]];
    if (dst->code)
        memcpy(dst->code + (size_t)di * dst->dim, in, (size_t)src->dim);
    dst->y[di] = src->y[si];
}

/* trn_data_load_idx with the images' decompressed copy in dir (NULL:
   none). */
static int s_load_idx(trn_dataset *ds, const char *images, const char *labels,
                      const char *dir, char *err)
{
    unsigned char *raw;
    size_t maplen;
    if (s_load_raw_cached(ds, &raw, &maplen, images, labels, dir, err) < 0)
        return -1;
    ds->x = malloc((size_t)ds->n * ds->dim * sizeof(float));
    if (!ds->x) {
        s_err(err, "out of memory loading %s", images);
        s_raw_free(raw, maplen);
        trn_data_free(ds);
        return -1;
    }
    float lut[256];
    s_lut(lut);
    size_t npix = (size_t)ds->n * ds->dim;
    for (size_t i = 0; i < npix; i++)
        ds->x[i] = lut[raw[i]];
    s_raw_free(raw, maplen);
    return 0;
}

int trn_data_load_idx(trn_dataset *ds, const char *images, const char *labels, char *err)
{
    return s_load_idx(ds, images, labels, NULL, err);
}

void trn_data_free(trn_dataset *d)
{
    if (!d)
        return;
    free(d->x);
    free(d->y);
    free(d->code);
    memset(d, 0, sizeof *d);
}

static int s_alloc(trn_dataset *d, int n, const trn_dataset *shape, char *err)
{
    memset(d, 0, sizeof *d);
    d->n = n;
    d->c = shape->c;
    d->h = shape->h;
    d->w = shape->w;
    d->dim = shape->dim;
    d->classes = shape->classes;
    d->x = malloc((size_t)(n ? n : 1) * d->dim * sizeof(float));
    d->y = malloc((size_t)(n ? n : 1));
    if (!d->x || !d->y) {
        trn_data_free(d);
        s_err(err, "out of memory");
        return -1;
    }
    return 0;
}

int trn_data_synthetic(trn_dataset *d, int n, uint64_t seed, char *err)
{
    trn_dataset shape = {.c = 1, .h = 28, .w = 28, .dim = 784, .classes = 10};
    if (s_alloc(d, n, &shape, err) < 0)
        return -1;
    /* Ten fixed prototypes (same for every seed), examples are a prototype
       plus noise; the seed picks the examples. Linearly separable enough
       for a quick test, noisy enough not to be trivial. */
    trn_rng pr, r;
    trn_rng_seed(&pr, 12345);
    float proto[10][784];
    for (int k = 0; k < 10; k++)
        for (int j = 0; j < 784; j++)
            proto[k][j] = (float)trn_rng_normal(&pr);
    trn_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        int k = (int)(trn_rng_next(&r) % 10);
        d->y[i] = (uint8_t)k;
        float *x = d->x + (size_t)i * 784;
        for (int j = 0; j < 784; j++)
            x[j] = 0.3f * proto[k][j] + (float)trn_rng_normal(&r);
    }
    return 0;
}

/* 0 when both files can be opened for reading, else -1 with err (the
   message a load would give): a deferred test set fails at the start. */
static int s_check_readable(const char *a, const char *b, char *err)
{
    const char *p = access(a, R_OK) != 0 ? a : access(b, R_OK) != 0 ? b : NULL;
    if (!p)
        return 0;
    s_err(err, "%s: cannot open: %s (install dataset-fashion-mnist or pass --data-dir)",
          p, strerror(errno));
    return -1;
}

/* The test set's two files in c's data_dir. */
static void s_test_paths(const trn_config *c, char *pi, char *pl, size_t size)
{
    snprintf(pi, size, "%s/t10k-images-idx3-ubyte.gz", c->data_dir);
    snprintf(pl, size, "%s/t10k-labels-idx1-ubyte.gz", c->data_dir);
}

int trn_data_load_test(const trn_config *c, trn_dataset *test, char *err)
{
    memset(test, 0, sizeof *test);
    if (!strcmp(c->dataset, "synthetic")) {
        int nv = c->val_size < 1 ? 1 : (c->val_size > 2000 ? 2000 : c->val_size);
        return trn_data_synthetic(test, nv, 3000, err);
    }
    char pi[512], pl[512], cache[512];
    s_test_paths(c, pi, pl, sizeof pi);
    return s_load_idx(test, pi, pl, s_cache_dir(c, cache, sizeof cache), err);
}

int trn_data_load(const trn_config *c, trn_dataset *train, trn_dataset *val,
                  trn_dataset *test, char *err)
{
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    if (test)
        memset(test, 0, sizeof *test);
    unsigned char *raw = NULL;
    size_t maplen = 0;
    if (!strcmp(c->dataset, "synthetic")) {
        if (trn_data_synthetic(train, c->synthetic_n, 1000, err) < 0)
            return -1;
        int nv = c->val_size < 1 ? 1 : (c->val_size > 2000 ? 2000 : c->val_size);
        if (trn_data_synthetic(val, nv, 2000, err) < 0 ||
            (test && trn_data_load_test(c, test, err) < 0))
            goto fail;
        return 0;
    }
    char pi[512], pl[512];
    trn_dataset full;
    snprintf(pi, sizeof pi, "%s/train-images-idx3-ubyte.gz", c->data_dir);
    snprintf(pl, sizeof pl, "%s/train-labels-idx1-ubyte.gz", c->data_dir);
    /* the full training set stays bytes: only the examples kept are
       converted (a 20 000-example subset converts a third of it) */
    char cache[512];
    if (s_load_raw_cached(&full, &raw, &maplen, pi, pl,
                          s_cache_dir(c, cache, sizeof cache), err) < 0)
        return -1;
    float lut[256];
    s_lut(lut);
    s_test_paths(c, pi, pl, sizeof pi);
    if (test ? trn_data_load_test(c, test, err) < 0 : s_check_readable(pi, pl, err) < 0) {
        s_raw_free(raw, maplen);
        trn_data_free(&full);
        return -1;
    }
    if (c->val_size >= full.n) {
        s_err(err, "--val-size: %d leaves no training data (the set has %d examples)",
              c->val_size, full.n);
        trn_data_free(&full);
        goto fail;
    }
    int *perm = malloc((size_t)full.n * sizeof(int));
    if (!perm) {
        trn_data_free(&full);
        s_err(err, "out of memory");
        goto fail;
    }
    trn_rng r;
    trn_rng_seed(&r, SPLIT_SEED);
    trn_rng_perm(&r, perm, full.n);
    int ntr = full.n - c->val_size;
    if (c->train_subset > 0 && c->train_subset < ntr)
        ntr = c->train_subset;
    if (s_alloc(train, ntr, &full, err) < 0 ||
        s_alloc(val, c->val_size, &full, err) < 0) {
        free(perm);
        trn_data_free(&full);
        goto fail;
    }
    /* the training set's bytes too, for the host's gathers (trn.h), where
       this CPU has a vector lookup the run may take: fp32's, or bf16's
       when the run asks for bf16 at start or in its schedule (a later live
       change to bf16 without them uses the bf16 copy); none for a CUDA
       run that keeps its data on the device. Without them (or the
       memory) the gathers read x */
    int device = !strcmp(c->backend, "cuda") && !strcmp(c->gpu_data, "device");
    if (!device && (trn_gather_code_simd(0) ||
                    (trn_config_wants_bf16(c) && trn_gather_code_simd(1))))
        train->code = trn_alloc_rows((size_t)(ntr ? ntr : 1) * full.dim);
    memcpy(train->lut, lut, sizeof lut);
    /* Keep the training examples in their original order (the shuffle only
       decides membership) so a subset is stable. */
    for (int i = 0; i < c->val_size; i++)
        s_convert(val, i, &full, raw, perm[full.n - c->val_size + i], lut);
    char *is_val = calloc((size_t)full.n, 1);
    if (!is_val) {
        free(perm);
        trn_data_free(&full);
        s_err(err, "out of memory");
        goto fail;
    }
    for (int i = 0; i < c->val_size; i++)
        is_val[perm[full.n - c->val_size + i]] = 1;
    for (int i = 0, k = 0; i < full.n && k < ntr; i++)
        if (!is_val[i])
            s_convert(train, k++, &full, raw, i, lut);
    free(is_val);
    free(perm);
    s_raw_free(raw, maplen);
    trn_data_free(&full);
    return 0;
fail:
    s_raw_free(raw, maplen);
    trn_data_free(train);
    trn_data_free(val);
    if (test)
        trn_data_free(test);
    return -1;
}
