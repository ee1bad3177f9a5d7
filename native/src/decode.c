/* RecordBatch v2 parsing into columns. Layout of a batch (big-endian):
 *   baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32 |
 *   attributes int16 | lastOffsetDelta int32 | firstTimestamp int64 | maxTimestamp int64 |
 *   producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32 | records...
 * The CRC covers attributes to the end. Each record: length varint | attributes int8 | timestampDelta varlong |
 * offsetDelta varint | keyLength varint | key | valueLength varint | value | headerCount varint |
 * headers (keyLength varint | key | valueLength varint | value). Varints are zigzag-encoded. */
#include "spdecode.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOG_OVERHEAD 12        /* baseOffset + batchLength */
#define HEADER_SIZE 61         /* everything before the records */
#define MIN_RECORD_BYTES 7     /* smallest possible record: seven one-byte fields */

static int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

/* Offsets and timestamps from hostile input may overflow: wrap as Java does instead of undefined behaviour. */
static int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }

/* -- growable buffers ------------------------------------------------------------------------------------ */

static int buf_reserve(sp_buf *b, size_t extra) {
    if (extra <= b->cap - b->len) return SP_OK;
    size_t want = b->len + extra;
    if (want < b->len) return SP_ERR_NOMEM;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < want) {
        if (cap > SIZE_MAX / 2) return SP_ERR_NOMEM;
        cap *= 2;
    }
    uint8_t *p = realloc(b->data, cap);
    if (!p) return SP_ERR_NOMEM;
    b->data = p;
    b->cap = cap;
    return SP_OK;
}

static inline void put_i64(sp_buf *b, int64_t v) { memcpy(b->data + b->len, &v, 8); b->len += 8; }
static inline void put_i32(sp_buf *b, int32_t v) { memcpy(b->data + b->len, &v, 4); b->len += 4; }

/* Bitmap of `nbits` bits: set bit `i` (LSB first, as Arrow). */
static int bit_append(sp_buf *b, size_t i, int valid) {
    if ((i & 7) == 0) {
        if (buf_reserve(b, 1)) return SP_ERR_NOMEM;
        b->data[b->len++] = 0;
    }
    if (valid) b->data[i >> 3] |= (uint8_t)(1u << (i & 7));
    return SP_OK;
}

void sp_result_init(sp_result *r) {
    memset(r, 0, sizeof *r);
    r->next_offset = -1;
}

void sp_result_free(sp_result *r) {
    sp_buf *bufs[] = {&r->offsets, &r->timestamps, &r->key_offsets, &r->keys, &r->key_valid, &r->value_offsets,
                      &r->values, &r->value_valid, &r->header_offsets, &r->hkey_offsets, &r->hkeys,
                      &r->hvalue_offsets, &r->hvalues, &r->hvalue_valid, &r->filtered_ranges,
                      &r->foreign_ranges};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]->data);
    free(r->batches);
    memset(r, 0, sizeof *r);
}

/* -- errors ----------------------------------------------------------------------------------------------- */

static int fail(sp_result *r, int kind, int64_t position, int64_t base_offset, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err_msg, sizeof r->err_msg, fmt, ap);
    va_end(ap);
    r->err_kind = kind;
    r->err_position = position;
    r->err_base_offset = base_offset;
    r->stop = SP_STOP_ERROR;
    return kind;
}

/* -- varints ---------------------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p, *end;
    const uint8_t *base; /* start of the records section, for positions in messages */
} cursor;

/* A zigzag varint of at most `maxbytes` bytes. On failure the cursor stays where the varint starts. */
static int read_varlong(cursor *c, int64_t *out, int maxbytes) {
    uint64_t v = 0;
    const uint8_t *p = c->p;
    for (int shift = 0, i = 0; i < maxbytes; i++, shift += 7) {
        if (p >= c->end) return -1;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1)); /* zigzag */
            c->p = p;
            return 0;
        }
    }
    return -2; /* too long */
}

#define VARINT(c, out) read_varlong((c), (out), 5)
#define VARLONG(c, out) read_varlong((c), (out), 10)

/* -- records ---------------------------------------------------------------------------------------------- */

typedef struct {
    sp_header_view *items; /* one record's headers, parsed before the record is matched and emitted */
    size_t cap;
} header_views;

typedef struct {
    sp_result *r;
    const sp_batch_info *batch;
    int emit;            /* append to the columns (0 for control and aborted batches) */
    int64_t min_offset;  /* records below it are parsed but not emitted */
    int64_t records_pos; /* input position of the records section, when uncompressed */
    int compressed;
    int control_type;    /* for control batches: 0 abort, 1 commit, -1 unknown */
    const sp_where *where; /* records it does not match are parsed but not emitted (NULL: none) */
    const sp_where *mine;  /* records it does not match are another reader's (NULL: every record is ours) */
    int64_t partition;
    header_views *headers;
} batch_ctx;

static int bad_record(batch_ctx *ctx, cursor *c, int32_t index, const char *what) {
    const sp_batch_info *b = ctx->batch;
    int64_t at = (int64_t)(c->p - c->base);
    if (ctx->compressed)
        return fail(ctx->r, SP_ERR_CORRUPT, b->position, b->base_offset,
                    "record %d of the batch at byte %lld (base offset %lld): %s, at byte %lld of its "
                    "decompressed records",
                    index, (long long)b->position, (long long)b->base_offset, what, (long long)at);
    return fail(ctx->r, SP_ERR_CORRUPT, ctx->records_pos + at, b->base_offset,
                "record %d of the batch at byte %lld (base offset %lld): %s, at byte %lld of the input", index,
                (long long)b->position, (long long)b->base_offset, what, (long long)(ctx->records_pos + at));
}

/* A length-prefixed field: -1 is null; anything else must fit in what is left. On failure the cursor
 * stays at the start of the field, which is where errors point. */
static int read_field(cursor *c, const uint8_t **data, int64_t *len) {
    const uint8_t *start = c->p;
    if (VARINT(c, len)) return -1;
    if (*len < -1 || *len > (int64_t)(c->end - c->p)) {
        c->p = start;
        return -1;
    }
    *data = c->p;
    if (*len > 0) c->p += *len;
    return 0;
}

/* One more offset left out, in [start, end) int64 pairs: the last run goes on when it ends at `offset`. */
static int add_run(sp_buf *runs, int64_t offset) {
    int64_t last_end, end = wrap_add(offset, 1);
    if (runs->len >= 16) memcpy(&last_end, runs->data + runs->len - 8, 8);
    if (runs->len >= 16 && last_end == offset) {
        memcpy(runs->data + runs->len - 8, &end, 8); /* the run goes on */
        return SP_OK;
    }
    if (buf_reserve(runs, 16)) return SP_ERR_NOMEM;
    put_i64(runs, offset);
    put_i64(runs, end);
    return SP_OK;
}

static int parse_records(batch_ctx *ctx, const uint8_t *data, size_t len) {
    sp_result *r = ctx->r;
    const sp_batch_info *b = ctx->batch;
    cursor c = {data, data + len, data};
    int32_t n = b->record_count;
    if (n < 0 || (size_t)n > len / MIN_RECORD_BYTES + (len == 0 ? 0 : 1))
        return fail(r, SP_ERR_CORRUPT, b->position + 57, b->base_offset,
                    "batch at byte %lld (base offset %lld) claims %d records in %zu bytes", (long long)b->position,
                    (long long)b->base_offset, n, len);
    if (ctx->emit) {
        size_t k = (size_t)n;
        /* + 4: the offset columns start with a zero, written with the call's first record (the first batch
         * whose record count fills a power of two exactly overflowed by that one entry) */
        if (buf_reserve(&r->offsets, k * 8) || buf_reserve(&r->timestamps, k * 8) ||
            buf_reserve(&r->key_offsets, k * 4 + 4) || buf_reserve(&r->value_offsets, k * 4 + 4) ||
            buf_reserve(&r->header_offsets, k * 4 + 4) || buf_reserve(&r->keys, len) || buf_reserve(&r->values, len))
            return fail(r, SP_ERR_NOMEM, b->position, b->base_offset, "out of memory");
    }
    for (int32_t i = 0; i < n; i++) {
        int64_t rec_len, ts_delta, off_delta, hcount;
        const uint8_t *at = c.p; /* errors point at the start of the field at fault */
        if (VARINT(&c, &rec_len) || rec_len < MIN_RECORD_BYTES - 1 || rec_len > (int64_t)(c.end - c.p)) {
            c.p = at;
            return bad_record(ctx, &c, i, "bad record length");
        }
        cursor rc = {c.p, c.p + rec_len, c.base};
        c.p += rec_len;
        rc.p += 1; /* attributes: unused */
        const uint8_t *key, *value;
        int64_t klen, vlen;
        if (VARLONG(&rc, &ts_delta)) return bad_record(ctx, &rc, i, "bad timestamp delta");
        at = rc.p;
        if (VARINT(&rc, &off_delta) || off_delta < 0) {
            rc.p = at;
            return bad_record(ctx, &rc, i, "bad offset delta");
        }
        if (read_field(&rc, &key, &klen)) return bad_record(ctx, &rc, i, "bad key length");
        if (read_field(&rc, &value, &vlen)) return bad_record(ctx, &rc, i, "bad value length");
        at = rc.p;
        if (VARINT(&rc, &hcount) || hcount < 0 || hcount > (int64_t)(rc.end - rc.p) / 2) {
            rc.p = at;
            return bad_record(ctx, &rc, i, "bad header count");
        }
        if (ctx->control_type == -2 && i == 0) { /* control record key: version int16, type int16 */
            ctx->control_type = (key && klen >= 4) ? be16(key + 2) : -1;
        }
        header_views *hv = ctx->headers;
        if ((size_t)hcount > hv->cap) {
            size_t cap = hv->cap ? hv->cap : 8;
            while (cap < (size_t)hcount) cap *= 2;
            sp_header_view *items = realloc(hv->items, cap * sizeof *items);
            if (!items) return fail(r, SP_ERR_NOMEM, b->position, b->base_offset, "out of memory");
            hv->items = items;
            hv->cap = cap;
        }
        for (int64_t h = 0; h < hcount; h++) {
            const uint8_t *hk, *hvalue;
            int64_t hklen, hvlen;
            at = rc.p;
            if (read_field(&rc, &hk, &hklen) || hklen < 0) {
                rc.p = at;
                return bad_record(ctx, &rc, i, "bad header key");
            }
            if (read_field(&rc, &hvalue, &hvlen)) return bad_record(ctx, &rc, i, "bad header value");
            hv->items[h] = (sp_header_view){{hk, hklen}, {hvalue, hvlen}};
        }
        if (rc.p != rc.end) return bad_record(ctx, &rc, i, "record length disagrees with its fields");
        int64_t offset = wrap_add(b->base_offset, off_delta);
        int64_t timestamp = b->log_append_time ? b->max_timestamp : wrap_add(b->first_timestamp, ts_delta);
        int emit = ctx->emit && offset >= ctx->min_offset;
        if (emit && (ctx->where || ctx->mine)) {
            sp_record_view view = {{key, klen},  {value, vlen}, timestamp, ctx->partition, hv->items, (size_t)hcount,
                                   offset};
            int foreign = ctx->mine && !sp_where_match(ctx->mine, &view);
            if (foreign || !sp_where_match(ctx->where, &view)) {
                emit = 0;
                if (foreign)
                    r->foreign++;
                else
                    r->filtered++;
                if (add_run(foreign ? &r->foreign_ranges : &r->filtered_ranges, offset))
                    return fail(r, SP_ERR_NOMEM, b->position, b->base_offset, "out of memory");
            }
        }
        if (emit) {
            size_t idx = r->count;
            if (idx == 0 && r->key_offsets.len == 0) {
                /* first record of the call: the leading zero offsets */
                if (buf_reserve(&r->key_offsets, 4) || buf_reserve(&r->value_offsets, 4) ||
                    buf_reserve(&r->header_offsets, 4) || buf_reserve(&r->hkey_offsets, 4) ||
                    buf_reserve(&r->hvalue_offsets, 4))
                    return fail(r, SP_ERR_NOMEM, b->position, b->base_offset, "out of memory");
                put_i32(&r->key_offsets, 0);
                put_i32(&r->value_offsets, 0);
                put_i32(&r->header_offsets, 0);
                put_i32(&r->hkey_offsets, 0);
                put_i32(&r->hvalue_offsets, 0);
            }
            if (r->keys.len + (klen > 0 ? klen : 0) > INT32_MAX || r->values.len + (vlen > 0 ? vlen : 0) > INT32_MAX)
                return fail(r, SP_ERR_LIMIT, b->position, b->base_offset, "more than 2 GiB of keys or values");
            put_i64(&r->offsets, offset);
            put_i64(&r->timestamps, timestamp);
            if (klen > 0) { memcpy(r->keys.data + r->keys.len, key, (size_t)klen); r->keys.len += (size_t)klen; }
            if (vlen > 0) { memcpy(r->values.data + r->values.len, value, (size_t)vlen); r->values.len += (size_t)vlen; }
            put_i32(&r->key_offsets, (int32_t)r->keys.len);
            put_i32(&r->value_offsets, (int32_t)r->values.len);
            if (bit_append(&r->key_valid, idx, klen >= 0) || bit_append(&r->value_valid, idx, vlen >= 0))
                return fail(r, SP_ERR_NOMEM, b->position, b->base_offset, "out of memory");
        }
        for (int64_t h = 0; h < hcount && emit; h++) {
            const uint8_t *hk = hv->items[h].key.data, *hvd = hv->items[h].value.data;
            int64_t hklen = hv->items[h].key.len, hvlen = hv->items[h].value.len;
            if (buf_reserve(&r->hkeys, (size_t)hklen) || buf_reserve(&r->hvalues, hvlen > 0 ? (size_t)hvlen : 0) ||
                buf_reserve(&r->hkey_offsets, 4) || buf_reserve(&r->hvalue_offsets, 4))
                return fail(r, SP_ERR_NOMEM, b->position, b->base_offset, "out of memory");
            if (r->hkeys.len + hklen > INT32_MAX || r->hvalues.len + (hvlen > 0 ? hvlen : 0) > INT32_MAX)
                return fail(r, SP_ERR_LIMIT, b->position, b->base_offset, "more than 2 GiB of headers");
            if (hklen > 0) { memcpy(r->hkeys.data + r->hkeys.len, hk, (size_t)hklen); r->hkeys.len += (size_t)hklen; }
            if (hvlen > 0) { memcpy(r->hvalues.data + r->hvalues.len, hvd, (size_t)hvlen); r->hvalues.len += (size_t)hvlen; }
            put_i32(&r->hkey_offsets, (int32_t)r->hkeys.len);
            put_i32(&r->hvalue_offsets, (int32_t)r->hvalues.len);
            if (bit_append(&r->hvalue_valid, r->header_count, hvlen >= 0))
                return fail(r, SP_ERR_NOMEM, b->position, b->base_offset, "out of memory");
            r->header_count++;
        }
        if (emit) {
            put_i32(&r->header_offsets, (int32_t)r->header_count);
            r->count++;
        }
    }
    if (c.p != c.end)
        return fail(r, SP_ERR_CORRUPT, b->position, b->base_offset,
                    "batch at byte %lld (base offset %lld) has %lld bytes after its %d records",
                    (long long)b->position, (long long)b->base_offset, (long long)(c.end - c.p), n);
    return SP_OK;
}

/* -- all or nothing per batch ------------------------------------------------------------------------------ */

/* Column lengths before a batch, so a batch that fails half way contributes nothing. */
typedef struct {
    size_t count, header_count, filtered, filtered_len, foreign, foreign_len, lens[14];
    int64_t filtered_end, foreign_end; /* the last runs' ends: a failed batch may have extended them */
} mark;

#define COLUMNS(r)                                                                                            \
    {&(r)->offsets, &(r)->timestamps, &(r)->key_offsets, &(r)->keys, &(r)->key_valid, &(r)->value_offsets,    \
     &(r)->values, &(r)->value_valid, &(r)->header_offsets, &(r)->hkey_offsets, &(r)->hkeys,                  \
     &(r)->hvalue_offsets, &(r)->hvalues, &(r)->hvalue_valid}

static mark take_mark(sp_result *r) {
    mark m = {r->count, r->header_count, r->filtered, r->filtered_ranges.len, r->foreign, r->foreign_ranges.len,
              {0}, 0, 0};
    if (m.filtered_len >= 16) memcpy(&m.filtered_end, r->filtered_ranges.data + m.filtered_len - 8, 8);
    if (m.foreign_len >= 16) memcpy(&m.foreign_end, r->foreign_ranges.data + m.foreign_len - 8, 8);
    sp_buf *cols[] = COLUMNS(r);
    for (size_t i = 0; i < 14; i++) m.lens[i] = cols[i]->len;
    return m;
}

static void roll_back(sp_result *r, const mark *m) {
    sp_buf *cols[] = COLUMNS(r);
    for (size_t i = 0; i < 14; i++) cols[i]->len = m->lens[i];
    r->count = m->count;
    r->header_count = m->header_count;
    r->filtered = m->filtered;
    r->filtered_ranges.len = m->filtered_len;
    if (m->filtered_len >= 16) memcpy(r->filtered_ranges.data + m->filtered_len - 8, &m->filtered_end, 8);
    r->foreign = m->foreign;
    r->foreign_ranges.len = m->foreign_len;
    if (m->foreign_len >= 16) memcpy(r->foreign_ranges.data + m->foreign_len - 8, &m->foreign_end, 8);
    /* validity bitmaps: clear the bits past the kept ones in their last byte */
    if (r->count & 7) {
        uint8_t keep = (uint8_t)((1u << (r->count & 7)) - 1);
        r->key_valid.data[r->key_valid.len - 1] &= keep;
        r->value_valid.data[r->value_valid.len - 1] &= keep;
    }
    if (r->header_count & 7) r->hvalue_valid.data[r->hvalue_valid.len - 1] &= (uint8_t)((1u << (r->header_count & 7)) - 1);
}

/* -- aborted transactions (read committed) ---------------------------------------------------------------- */

typedef struct {
    int64_t *pids;
    size_t n, cap;
} pid_set;

static int pid_has(const pid_set *s, int64_t pid) {
    for (size_t i = 0; i < s->n; i++)
        if (s->pids[i] == pid) return 1;
    return 0;
}
static int pid_add(pid_set *s, int64_t pid) {
    if (pid_has(s, pid)) return SP_OK;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        int64_t *p = realloc(s->pids, cap * sizeof *p);
        if (!p) return SP_ERR_NOMEM;
        s->pids = p;
        s->cap = cap;
    }
    s->pids[s->n++] = pid;
    return SP_OK;
}
static void pid_remove(pid_set *s, int64_t pid) {
    for (size_t i = 0; i < s->n; i++)
        if (s->pids[i] == pid) { s->pids[i] = s->pids[--s->n]; return; }
}

static int cmp_aborted(const void *a, const void *b) {
    int64_t x = ((const sp_aborted_txn *)a)->first_offset, y = ((const sp_aborted_txn *)b)->first_offset;
    return (x > y) - (x < y);
}

/* -- where whole batches end ------------------------------------------------------------------------------- */

int64_t sp_records_end(const uint8_t *in, size_t len) {
    size_t pos = 0;
    int64_t end = -1;
    while (len - pos >= 27) { /* up to and with the last offset delta */
        const uint8_t *p = in + pos;
        int32_t batch_len = be32(p + 8);
        if (batch_len < HEADER_SIZE - LOG_OVERHEAD || (int8_t)p[16] != 2) break;
        size_t total = (size_t)batch_len + LOG_OVERHEAD;
        if (total > len - pos) break;
        int32_t last_delta = be32(p + 23);
        if (last_delta < 0) break;
        end = wrap_add(wrap_add(be64(p), last_delta), 1);
        pos += total;
    }
    return end;
}

/* -- batches ---------------------------------------------------------------------------------------------- */

int sp_decode(const uint8_t *in, size_t len, size_t max_decompressed, int verify_crc,
              const sp_aborted_txn *aborted_in, size_t naborted, int64_t min_offset, sp_result *r) {
    return sp_decode_where(in, len, max_decompressed, verify_crc, aborted_in, naborted, min_offset, NULL, NULL, -1,
                           r);
}

int sp_decode_where(const uint8_t *in, size_t len, size_t max_decompressed, int verify_crc,
                    const sp_aborted_txn *aborted_in, size_t naborted, int64_t min_offset, const sp_where *where,
                    const sp_where *mine, int64_t partition, sp_result *r) {
    size_t pos = 0;
    header_views headers = {NULL, 0};
    pid_set active = {0};
    sp_aborted_txn *aborted = NULL;
    size_t next_aborted = 0;
    int rc = SP_OK;
    if (aborted_in && naborted) {
        aborted = malloc(naborted * sizeof *aborted);
        if (!aborted) return fail(r, SP_ERR_NOMEM, 0, -1, "out of memory");
        memcpy(aborted, aborted_in, naborted * sizeof *aborted);
        qsort(aborted, naborted, sizeof *aborted, cmp_aborted);
    }
    r->stop = SP_STOP_END;
    while (pos < len) {
        const uint8_t *p = in + pos;
        size_t left = len - pos;
        if (left < LOG_OVERHEAD) { r->stop = SP_STOP_INCOMPLETE; break; }
        int64_t base_offset = be64(p);
        int32_t batch_len = be32(p + 8);
        if (batch_len < HEADER_SIZE - LOG_OVERHEAD) {
            rc = fail(r, SP_ERR_CORRUPT, (int64_t)pos, base_offset,
                      "batch at byte %zu (base offset %lld) has length %d, shorter than a batch header", pos,
                      (long long)base_offset, batch_len);
            break;
        }
        if (left < 17) { r->stop = SP_STOP_INCOMPLETE; break; }
        int8_t magic = (int8_t)p[16];
        if (magic != 2) {
            rc = fail(r, SP_ERR_MAGIC, (int64_t)pos + 16, base_offset,
                      "batch at byte %zu (base offset %lld) has magic %d: only RecordBatch v2 (magic 2) is supported "
                      "(v0 and v1 message sets come from brokers older than 0.11)",
                      pos, (long long)base_offset, magic);
            break;
        }
        size_t total = (size_t)batch_len + LOG_OVERHEAD;
        if (total > left) { r->stop = SP_STOP_INCOMPLETE; break; }

        sp_batch_info b;
        memset(&b, 0, sizeof b);
        b.position = (int64_t)pos;
        b.base_offset = base_offset;
        b.partition_leader_epoch = be32(p + 12);
        uint32_t crc = (uint32_t)be32(p + 17);
        b.attributes = be16(p + 21);
        int32_t last_delta = be32(p + 23);
        b.first_timestamp = be64(p + 27);
        b.max_timestamp = be64(p + 35);
        b.producer_id = be64(p + 43);
        b.producer_epoch = be16(p + 51);
        b.base_sequence = be32(p + 53);
        b.record_count = be32(p + 57);
        b.codec = b.attributes & 7;
        b.log_append_time = (b.attributes >> 3) & 1;
        b.transactional = (b.attributes >> 4) & 1;
        b.control = (b.attributes >> 5) & 1;
        b.last_offset = wrap_add(base_offset, last_delta);
        b.compressed_size = (int64_t)(total - HEADER_SIZE);

        if (last_delta < 0) {
            rc = fail(r, SP_ERR_CORRUPT, (int64_t)pos + 23, base_offset,
                      "batch at byte %zu (base offset %lld) has a negative last offset delta %d", pos,
                      (long long)base_offset, last_delta);
            break;
        }
        if (verify_crc) {
            uint32_t actual = sp_crc32c(0, p + 21, total - 21);
            if (actual != crc) {
                rc = fail(r, SP_ERR_CRC, (int64_t)pos + 17, base_offset,
                          "batch at byte %zu (base offset %lld) fails its CRC32C check: stored %08x, computed %08x",
                          pos, (long long)base_offset, crc, actual);
                break;
            }
        }

        const uint8_t *records = p + HEADER_SIZE;
        size_t records_len = total - HEADER_SIZE;
        size_t budget = max_decompressed - r->decompressed_total;
        if (b.codec != 0) {
            char msg[200];
            const uint8_t *inflated;
            size_t inflated_len;
            int d = sp_decompress(b.codec, records, records_len, budget, &inflated, &inflated_len, msg, sizeof msg);
            if (d == SP_ERR_LIMIT && r->nbatches > 0 && budget < max_decompressed) {
                r->stop = SP_STOP_BUDGET; /* fine alone, but not within what is left of this call */
                break;
            }
            if (d != SP_OK) {
                static const char *codecs[] = {"none", "gzip", "snappy", "lz4", "zstd", "?", "?", "?"};
                rc = fail(r, d, (int64_t)pos, base_offset, "batch at byte %zu (base offset %lld, %s, %zu bytes): %s",
                          pos, (long long)base_offset, codecs[b.codec], records_len, msg);
                r->err_size = (int64_t)records_len;
                r->err_limit = (int64_t)budget;
                break;
            }
            records = inflated;
            records_len = inflated_len;
        } else if (records_len > budget) {
            if (r->nbatches > 0 && budget < max_decompressed) { r->stop = SP_STOP_BUDGET; break; }
            rc = fail(r, SP_ERR_LIMIT, (int64_t)pos, base_offset,
                      "batch at byte %zu (base offset %lld) holds %zu bytes of records, past the limit of %zu bytes",
                      pos, (long long)base_offset, records_len, budget);
            r->err_size = (int64_t)records_len;
            r->err_limit = (int64_t)budget;
            break;
        }
        b.decompressed_size = (int64_t)records_len;

        batch_ctx ctx = {r, &b, 1, min_offset, (int64_t)pos + HEADER_SIZE, b.codec != 0, -1, where, mine,
                         partition, &headers};
        if (aborted && b.producer_id >= 0) {
            while (next_aborted < naborted && aborted[next_aborted].first_offset <= b.last_offset)
                if (pid_add(&active, aborted[next_aborted++].producer_id)) {
                    rc = fail(r, SP_ERR_NOMEM, (int64_t)pos, base_offset, "out of memory");
                    goto done;
                }
            if (!b.control && b.transactional && pid_has(&active, b.producer_id)) {
                b.aborted = 1;
                ctx.emit = 0;
            }
        }
        if (b.control) {
            ctx.emit = 0;
            ctx.control_type = -2; /* read from the first record */
        }
        mark before = take_mark(r);
        if ((rc = parse_records(&ctx, records, records_len)) != SP_OK) {
            roll_back(r, &before);
            break;
        }
        if (b.control && ctx.control_type == 0 && aborted) pid_remove(&active, b.producer_id);

        if (r->nbatches == r->batches_cap) {
            size_t cap = r->batches_cap ? r->batches_cap * 2 : 16;
            sp_batch_info *nb = realloc(r->batches, cap * sizeof *nb);
            if (!nb) { rc = fail(r, SP_ERR_NOMEM, (int64_t)pos, base_offset, "out of memory"); break; }
            r->batches = nb;
            r->batches_cap = cap;
        }
        r->batches[r->nbatches++] = b;
        r->decompressed_total += records_len;
        r->next_offset = wrap_add(b.last_offset, 1);
        pos += total;
        r->consumed = pos;
    }
done:
    if (r->stop == SP_STOP_ERROR) /* the failed batch's last offset, when its header is there to say it */
        r->err_last_offset = len - pos >= 27 ? wrap_add(be64(in + pos), be32(in + pos + 23)) : -1;
    free(aborted);
    free(active.pids);
    free(headers.items);
    sp_decompress_trim();
    if (r->count == 0 && r->key_offsets.len == 0) {
        /* no record emitted: the offset columns still hold their single leading zero */
        sp_buf *zeros[] = {&r->key_offsets, &r->value_offsets, &r->header_offsets, &r->hkey_offsets, &r->hvalue_offsets};
        for (size_t i = 0; i < 5; i++) {
            if (buf_reserve(zeros[i], 4)) return fail(r, SP_ERR_NOMEM, 0, -1, "out of memory");
            put_i32(zeros[i], 0);
        }
    }
    return rc;
}
