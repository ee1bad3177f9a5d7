/* Bounded decompression for Kafka's codecs. Output goes into the thread's buffer, reserved at the limit (+1)
 * (virtual memory: pages count towards RSS only once written), and each codec is driven with that buffer
 * as its only output, so inflating stops the moment the limit is reached. */
#define _DEFAULT_SOURCE /* madvise */
#include "spdecode.h"

#include <lz4frame.h>
#include <snappy-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_d_stableOutBuffer: a parameter of the stable ABI since 1.4.0 */
#include <zstd.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zstd_errors.h>

static int reserve_exact(sp_buf *b, size_t cap) {
    if (b->cap >= cap) return SP_OK;
    uint8_t *p = realloc(b->data, cap ? cap : 1);
    if (!p) return SP_ERR_NOMEM;
    b->data = p;
    b->cap = cap;
    return SP_OK;
}

#define FAIL(kind, ...)                          \
    do {                                         \
        snprintf(msg, msglen, __VA_ARGS__);      \
        return (kind);                           \
    } while (0)

static int limit_error(char *msg, size_t msglen, size_t limit) {
    snprintf(msg, msglen, "inflates past the limit of %zu bytes", limit);
    return SP_ERR_LIMIT;
}

static int do_gzip(const uint8_t *src, size_t srclen, size_t limit, sp_buf *out, char *msg, size_t msglen) {
    /* A batch is under 2 GiB (its length is an int32), so sizes fit zlib's uInt. */
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, 15 + 32) != Z_OK) FAIL(SP_ERR_NOMEM, "zlib could not start");
    zs.next_in = (Bytef *)src;
    zs.avail_in = (uInt)srclen;
    int rc = SP_OK;
    while (1) {
        zs.next_out = out->data + out->len;
        zs.avail_out = (uInt)(limit + 1 - out->len);
        uInt room = zs.avail_out;
        int z = inflate(&zs, Z_NO_FLUSH);
        out->len += room - zs.avail_out;
        if (z != Z_OK && z != Z_STREAM_END && z != Z_BUF_ERROR) { /* bad data wins over the limit */
            snprintf(msg, msglen, "gzip data is invalid: %s", zs.msg ? zs.msg : "unknown zlib error");
            rc = SP_ERR_DECOMPRESS;
            break;
        }
        if (out->len > limit) { rc = limit_error(msg, msglen, limit); break; }
        if (z == Z_STREAM_END) {
            if (zs.avail_in == 0) break;
            inflateReset(&zs); /* another gzip member follows */
            continue;
        }
        if (z == Z_BUF_ERROR) { /* no progress possible: out of input */
            snprintf(msg, msglen, "gzip data is truncated");
            rc = SP_ERR_DECOMPRESS;
            break;
        }
    }
    inflateEnd(&zs);
    return rc;
}

/* What a thread keeps from one batch, and one decode call, to the next, freed when the thread ends:
 * - its zstd context (creating one costs more than decoding a small batch);
 * - the buffer batches inflate into. One made for each call cost an mmap of the limit, its munmap and a page
 *   fault for every page written: a tenth of a filtered read's CPU on batches of about 100 records. The pages
 *   a call wrote past the first KEEP_INFLATED bytes go back to the system when it ends (sp_decompress_trim),
 *   so a thread keeps the memory of an ordinary batch, not that of the largest it ever inflated. */
#define KEEP_INFLATED ((size_t)1 << 20)
/* How far past what it reports a codec may have written: zstd keeps a block's literals in the output buffer
 * beyond the block (up to one block of 128 KiB), and a page on either side. */
#define WRITE_MARGIN (((size_t)128 << 10) + 8192)

typedef struct {
    ZSTD_DCtx *zstd;
    sp_buf out;
    size_t written; /* bytes of `out` a call may have written, from its start */
} thread_state;

static pthread_key_t state_key;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;

static void state_free(void *p) {
    thread_state *st = p;
    ZSTD_freeDCtx(st->zstd);
    free(st->out.data);
    free(st);
}

static void state_make_key(void) { pthread_key_create(&state_key, state_free); }

static thread_state *thread_own(void) {
    pthread_once(&state_once, state_make_key);
    thread_state *st = pthread_getspecific(state_key);
    if (st) return st;
    st = calloc(1, sizeof *st);
    if (st && pthread_setspecific(state_key, st) != 0) {
        free(st);
        return NULL;
    }
    return st;
}

static ZSTD_DCtx *zstd_context(thread_state *st) {
    if (st->zstd) {
        ZSTD_DCtx_reset(st->zstd, ZSTD_reset_session_and_parameters);
        return st->zstd;
    }
    return st->zstd = ZSTD_createDCtx();
}

void sp_decompress_trim(void) {
    pthread_once(&state_once, state_make_key);
    thread_state *st = pthread_getspecific(state_key);
    if (!st || st->written <= KEEP_INFLATED) return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t from = ((uintptr_t)st->out.data + KEEP_INFLATED + page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t to = ((uintptr_t)st->out.data + st->written) & ~(uintptr_t)(page - 1);
    if (to > from) madvise((void *)from, to - from, MADV_DONTNEED); /* whole pages inside the buffer */
    st->written = 0;
}

static int do_zstd(ZSTD_DCtx *d, const uint8_t *src, size_t srclen, size_t limit, sp_buf *out, char *msg,
                   size_t msglen) {
    unsigned long long declared = ZSTD_getFrameContentSize(src, srclen);
    if (declared != ZSTD_CONTENTSIZE_ERROR && declared != ZSTD_CONTENTSIZE_UNKNOWN && declared > limit) {
        snprintf(msg, msglen, "declares %llu decompressed bytes, past the limit of %zu bytes", declared, limit);
        return SP_ERR_LIMIT;
    }
    if (!d) FAIL(SP_ERR_NOMEM, "zstd could not start");
    /* Our output buffer is the window: zstd allocates none of its own, so memory stays within the limit
     * whatever window a frame declares (librdkafka declares 2 MiB for small batches when it does not know
     * their size, so a cap on the window would refuse good batches under small limits). */
    ZSTD_DCtx_setParameter(d, ZSTD_d_stableOutBuffer, 1);
    ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, ZSTD_WINDOWLOG_MAX);
    ZSTD_inBuffer in = {src, srclen, 0};
    ZSTD_outBuffer o = {out->data, limit + 1, 0};
    int rc = SP_OK;
    while (1) {
        size_t before_in = in.pos, before_out = o.pos;
        size_t z = ZSTD_decompressStream(d, &o, &in);
        if (ZSTD_isError(z)) {
            ZSTD_ErrorCode code = ZSTD_getErrorCode(z);
            if (code == ZSTD_error_frameParameter_windowTooLarge || code == ZSTD_error_dstSize_tooSmall)
                rc = limit_error(msg, msglen, limit);
            else {
                snprintf(msg, msglen, "zstd data is invalid: %s", ZSTD_getErrorName(z));
                rc = SP_ERR_DECOMPRESS;
            }
            break;
        }
        if (o.pos > limit) { rc = limit_error(msg, msglen, limit); break; }
        if (z == 0 && in.pos == in.size) break; /* last frame complete */
        if (in.pos == in.size && o.pos == before_out) {
            snprintf(msg, msglen, "zstd data is truncated");
            rc = SP_ERR_DECOMPRESS;
            break;
        }
        if (in.pos == before_in && o.pos == before_out) {
            snprintf(msg, msglen, "zstd made no progress");
            rc = SP_ERR_DECOMPRESS;
            break;
        }
    }
    out->len = o.pos;
    return rc; /* the context stays with this thread for its next batch */
}

static int do_lz4(const uint8_t *src, size_t srclen, size_t limit, sp_buf *out, char *msg, size_t msglen) {
    LZ4F_dctx *d = NULL;
    if (LZ4F_isError(LZ4F_createDecompressionContext(&d, LZ4F_VERSION))) FAIL(SP_ERR_NOMEM, "lz4 could not start");
    int rc = SP_OK;
    size_t pos = 0;
    while (1) {
        size_t dst_size = limit + 1 - out->len;
        size_t src_size = srclen - pos;
        size_t hint = LZ4F_decompress(d, out->data + out->len, &dst_size, src + pos, &src_size, NULL);
        if (LZ4F_isError(hint)) {
            snprintf(msg, msglen, "lz4 data is invalid: %s", LZ4F_getErrorName(hint));
            rc = SP_ERR_DECOMPRESS;
            break;
        }
        out->len += dst_size;
        pos += src_size;
        if (out->len > limit) { rc = limit_error(msg, msglen, limit); break; }
        if (hint == 0) {
            if (pos == srclen) break; /* frame complete; another frame may follow */
            continue;
        }
        if (src_size == 0 && dst_size == 0) { /* no progress: the frame needs input that is not there */
            snprintf(msg, msglen, "lz4 data is truncated");
            rc = SP_ERR_DECOMPRESS;
            break;
        }
    }
    LZ4F_freeDecompressionContext(d);
    return rc;
}

static int snappy_block(const uint8_t *src, size_t srclen, size_t limit, sp_buf *out, char *msg, size_t msglen) {
    size_t n;
    if (snappy_uncompressed_length((const char *)src, srclen, &n) != SNAPPY_OK)
        FAIL(SP_ERR_DECOMPRESS, "snappy data is invalid: bad length header");
    if (n > limit - out->len) {
        snprintf(msg, msglen, "declares %zu more decompressed bytes, past the limit of %zu bytes", n, limit);
        return SP_ERR_LIMIT;
    }
    size_t got = n;
    if (snappy_uncompress((const char *)src, srclen, (char *)out->data + out->len, &got) != SNAPPY_OK || got != n)
        FAIL(SP_ERR_DECOMPRESS, "snappy data is invalid");
    out->len += n;
    return SP_OK;
}

static const uint8_t XERIAL_MAGIC[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};

static int do_snappy(const uint8_t *src, size_t srclen, size_t limit, sp_buf *out, char *msg, size_t msglen) {
    if (srclen < 16 || memcmp(src, XERIAL_MAGIC, 8) != 0) return snappy_block(src, srclen, limit, out, msg, msglen);
    /* xerial framing (Java clients): 16-byte header, then blocks of [int32 big-endian length][raw snappy] */
    size_t pos = 16;
    while (pos < srclen) {
        if (srclen - pos < 4) FAIL(SP_ERR_DECOMPRESS, "xerial snappy block header is truncated");
        uint32_t n = ((uint32_t)src[pos] << 24) | ((uint32_t)src[pos + 1] << 16) | ((uint32_t)src[pos + 2] << 8) |
                     src[pos + 3];
        pos += 4;
        if (n > srclen - pos) FAIL(SP_ERR_DECOMPRESS, "xerial snappy block of %u bytes overruns the data", n);
        int rc = snappy_block(src + pos, n, limit, out, msg, msglen);
        if (rc) return rc;
        pos += n;
    }
    return SP_OK;
}

int sp_decompress(int codec, const uint8_t *src, size_t srclen, size_t limit, const uint8_t **data, size_t *len,
                  char *msg, size_t msglen) {
    thread_state *st = thread_own();
    if (!st) FAIL(SP_ERR_NOMEM, "out of memory");
    sp_buf *out = &st->out;
    out->len = 0;
    /* Room for one byte past the limit: a batch exceeds it only by really inflating further. */
    if (reserve_exact(out, limit + 1) != SP_OK) FAIL(SP_ERR_NOMEM, "cannot reserve %zu bytes", limit + 1);
    int rc;
    switch (codec) {
    case 1: rc = do_gzip(src, srclen, limit, out, msg, msglen); break;
    case 2: rc = do_snappy(src, srclen, limit, out, msg, msglen); break;
    case 3: rc = do_lz4(src, srclen, limit, out, msg, msglen); break;
    case 4: rc = do_zstd(zstd_context(st), src, srclen, limit, out, msg, msglen); break;
    default: FAIL(SP_ERR_CODEC, "unknown compression codec %d", codec);
    }
    /* A codec that failed may have written anywhere in the buffer; one that succeeded, not far past its end. */
    size_t written = rc == SP_OK && out->cap - out->len > WRITE_MARGIN ? out->len + WRITE_MARGIN : out->cap;
    if (written > st->written) st->written = written;
    *data = out->data;
    *len = out->len;
    return rc;
}
