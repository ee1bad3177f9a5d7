/*
 * streamplane's Kafka RecordBatch v2 decoder: the C core, free of Python so that fuzzers and sanitizer
 * builds can drive it directly. It turns the record set of one partition (a Fetch response's `records`)
 * into columns: offsets, timestamps, keys, values (Arrow binary layout with validity bitmaps) and headers.
 *
 * Decompression is bounded while it runs: no batch, and no call in total, inflates past `max_decompressed`.
 * Whatever the input bytes, the decoder never reads outside them and never allocates more than a small
 * multiple of `max_decompressed` plus the input size.
 */
#ifndef SPDECODE_H
#define SPDECODE_H

#include <stddef.h>
#include <stdint.h>

enum sp_error_kind {
    SP_OK = 0,
    SP_ERR_CORRUPT = 1,        /* malformed batch or record */
    SP_ERR_CRC = 2,            /* CRC32C mismatch */
    SP_ERR_MAGIC = 3,          /* not magic v2 */
    SP_ERR_CODEC = 4,          /* unknown compression codec */
    SP_ERR_DECOMPRESS = 5,     /* the codec refused the data */
    SP_ERR_LIMIT = 6,          /* inflating past max_decompressed */
    SP_ERR_NOMEM = 7,          /* allocation failed */
};

enum sp_stop_reason {
    SP_STOP_END = 0,           /* every byte of the input decoded */
    SP_STOP_INCOMPLETE = 1,    /* the input ends in a truncated batch (normal at the end of a fetch) */
    SP_STOP_BUDGET = 2,        /* the next batch would take the call past max_decompressed: fetch it again */
    SP_STOP_ERROR = 3,         /* the next batch is bad: see the error fields */
};

typedef struct {
    uint8_t *data;
    size_t len, cap;
} sp_buf;

typedef struct {
    int64_t base_offset;
    int64_t last_offset;
    int32_t partition_leader_epoch;
    int64_t first_timestamp, max_timestamp;
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
    int32_t record_count;
    int16_t attributes;
    int32_t codec;
    int32_t transactional, control, aborted, log_append_time;
    int64_t position;           /* byte position of the batch in the input */
    int64_t compressed_size;    /* bytes of the records section as stored */
    int64_t decompressed_size;  /* bytes of the records section once inflated */
} sp_batch_info;

typedef struct {
    int64_t producer_id;
    int64_t first_offset;
} sp_aborted_txn;

typedef struct {
    size_t count;                       /* records emitted */
    sp_buf offsets, timestamps;         /* int64 each */
    sp_buf key_offsets, keys, key_valid;        /* int32[count+1], bytes, bitmap */
    sp_buf value_offsets, values, value_valid;  /* int32[count+1], bytes, bitmap */
    sp_buf header_offsets;              /* int32[count+1] into the header entries */
    size_t header_count;
    sp_buf hkey_offsets, hkeys;         /* int32[header_count+1], bytes */
    sp_buf hvalue_offsets, hvalues, hvalue_valid;
    sp_batch_info *batches;
    size_t nbatches, batches_cap;
    int64_t next_offset;                /* offset after the last decoded batch, -1 if none */
    size_t consumed;                    /* input bytes of the decoded batches */
    int stop;                           /* enum sp_stop_reason */
    size_t decompressed_total;
    size_t filtered;                    /* records a `where` predicate left out (not emitted) */
    sp_buf filtered_ranges;             /* their offsets, as int64 [start, end) pairs in order, runs merged */
    size_t foreign;                     /* records outside a `mine` predicate: another reader's (not emitted) */
    sp_buf foreign_ranges;              /* their offsets, as filtered_ranges */
    /* error (stop == SP_STOP_ERROR) */
    int err_kind;
    char err_msg[320];
    int64_t err_position, err_base_offset, err_last_offset, err_size, err_limit;
} sp_result;

void sp_result_init(sp_result *r);
void sp_result_free(sp_result *r);

/* Decode `len` bytes at `in`. `aborted` (may be NULL: read uncommitted) lists aborted transactions as a
 * Fetch response gives them; their records are dropped. Returns the error kind (SP_OK unless stop is
 * SP_STOP_ERROR). Batches decoded before an error stay in `r`. Records below `min_offset` are not emitted
 * (Kafka returns whole batches, so a fetch from the middle of one starts earlier than asked). */
int sp_decode(const uint8_t *in, size_t len, size_t max_decompressed, int verify_crc,
              const sp_aborted_txn *aborted, size_t naborted, int64_t min_offset, sp_result *r);

/* -- record predicates (`where`) -----------------------------------------------------------------------------
 * A predicate arrives as a program (streamplane/native/where.py writes it; the grammar is core/predicate.py)
 * and is checked and compiled once; the decoder then leaves out, uncounted in `count` but counted in
 * `filtered`, every record it does not match, before any column is written for it. Program, little-endian:
 *   node := kind u8 (1 and, 2 or: n u16 then n nodes; 3 not: one node; 4 test: see below)
 *   test := subject u8 (1 key, 2 value, 3 timestamp, 4 partition, 5 header, 6 slice) | op u8 (1 =, 2 !=,
 *           3 ^=, 4 in, 5 contains, 6 exists, 7 <, 8 <=, 9 >, 10 >=) | [header: name length u16 | name] |
 *           count u16 | values (bytes subjects: length u32 | bytes; timestamp, partition and slice: int64)
 * A record's slice is its key hash: CRC-32 (zlib's) of its key, or of its offset as 8 bytes big-endian when it
 * has no key (core/predicate.py's slice_hash).
 * Nothing in the program is trusted: a bad one is refused with a sentence, never read past. */
typedef struct sp_where sp_where;

typedef struct {
    const uint8_t *data;
    int64_t len; /* -1: null */
} sp_span;

typedef struct {
    sp_span key, value;
} sp_header_view;

typedef struct {
    sp_span key, value;
    int64_t timestamp, partition;
    const sp_header_view *headers;
    size_t nheaders;
    int64_t offset;
} sp_record_view;

/* Compile a program; SP_OK and *out (sp_where_free it), or SP_ERR_CORRUPT / SP_ERR_NOMEM with `msg`. */
int sp_where_compile(const uint8_t *program, size_t len, sp_where **out, char *msg, size_t msglen);
void sp_where_free(sp_where *w);
int sp_where_match(const sp_where *w, const sp_record_view *record);

/* sp_decode with a predicate (NULL: every record) and the partition the record set is of (what `partition`
 * tests compare). `mine` (NULL: every record is) says which records are this reader's at all: one outside it
 * (a key slice another worker holds) is neither emitted nor matched against `where`, and is counted apart, in
 * `foreign`, since it is not done by being left out here, unlike a filtered one. */
int sp_decode_where(const uint8_t *in, size_t len, size_t max_decompressed, int verify_crc,
                    const sp_aborted_txn *aborted, size_t naborted, int64_t min_offset, const sp_where *where,
                    const sp_where *mine, int64_t partition, sp_result *r);

uint32_t sp_crc32c(uint32_t crc, const uint8_t *data, size_t len);
uint32_t sp_crc32c_sw(uint32_t crc, const uint8_t *data, size_t len);
int sp_crc32c_hw_available(void);

/* The offset after the last whole batch of a record set, from the batches' headers alone (nothing is
 * decompressed or checked); -1 when it holds none. Where its decoding will end when nothing in it is bad. */
int64_t sp_records_end(const uint8_t *in, size_t len);

/* Bounded decompression into the calling thread's buffer, kept from call to call: *data and *len give the
 * inflated bytes, valid until the thread's next sp_decompress. Returns SP_OK, SP_ERR_LIMIT, SP_ERR_DECOMPRESS
 * or SP_ERR_NOMEM; `msg` gets a sentence on error. */
int sp_decompress(int codec, const uint8_t *src, size_t srclen, size_t limit, const uint8_t **data, size_t *len,
                  char *msg, size_t msglen);

/* Gives back to the system the pages of the calling thread's buffer written past its first megabyte since
 * the last trim. Every decode call ends with it: a thread keeps the memory of an ordinary batch, not that of
 * the largest it ever inflated. */
void sp_decompress_trim(void);

#endif
