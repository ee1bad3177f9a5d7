/* libFuzzer harness over the decoder core. The first input byte picks the options (limit, CRC check,
 * aborted transactions); the rest is the record set. Besides crashes and sanitizer reports, it traps on
 * any broken invariant of the columns the decoder hands to Python and Arrow. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/spdecode.h"

#define CHECK(cond)                  \
    do {                             \
        if (!(cond)) __builtin_trap(); \
    } while (0)

static int32_t i32_at(const sp_buf *b, size_t i) {
    int32_t v;
    memcpy(&v, b->data + 4 * i, 4);
    return v;
}

static void check_offsets(const sp_buf *offsets, size_t n, const sp_buf *data) {
    CHECK(offsets->len == 4 * (n + 1));
    CHECK(i32_at(offsets, 0) == 0);
    for (size_t i = 0; i < n; i++) CHECK(i32_at(offsets, i) <= i32_at(offsets, i + 1));
    CHECK((size_t)i32_at(offsets, n) == data->len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const size_t limits[] = {1, 64, 1000, 1 << 16, 1 << 20, 16 << 20, 64, 4096};
    uint8_t opts = data[0];
    size_t limit = limits[opts & 7];
    int verify_crc = (opts >> 3) & 1;
    sp_aborted_txn aborted[2] = {{(opts >> 4) & 3, 0}, {5, 1}};
    int use_aborted = (opts >> 6) & 1;

    sp_result r;
    sp_result_init(&r);
    int rc = sp_decode(data + 1, size - 1, limit, verify_crc, use_aborted ? aborted : NULL, use_aborted ? 2 : 0, (opts >> 7) ? 3 : INT64_MIN, &r);
    CHECK((rc == SP_OK) == (r.stop != SP_STOP_ERROR));
    CHECK(r.consumed <= size - 1);
    CHECK(r.decompressed_total <= limit);
    CHECK(r.offsets.len == 8 * r.count && r.timestamps.len == 8 * r.count);
    check_offsets(&r.key_offsets, r.count, &r.keys);
    check_offsets(&r.value_offsets, r.count, &r.values);
    check_offsets(&r.header_offsets, r.count, &(sp_buf){NULL, r.header_count, 0});
    check_offsets(&r.hkey_offsets, r.header_count, &r.hkeys);
    check_offsets(&r.hvalue_offsets, r.header_count, &r.hvalues);
    CHECK(r.key_valid.len == (r.count + 7) / 8 && r.value_valid.len == (r.count + 7) / 8);
    CHECK(r.hvalue_valid.len == (r.header_count + 7) / 8);
    for (size_t i = 0; i < r.nbatches; i++) {
        CHECK(r.batches[i].decompressed_size >= 0 && (size_t)r.batches[i].decompressed_size <= limit);
        CHECK(r.batches[i].position >= 0 && (size_t)r.batches[i].position < size - 1);
    }
    /* Where whole batches end by their headers is where a decoding that met nothing bad ends (the fetch loop
     * asks for the next records from there before decoding). */
    if (rc == SP_OK && r.stop != SP_STOP_BUDGET) CHECK(sp_records_end(data + 1, size - 1) == r.next_offset);
    sp_result_free(&r);
    return 0;
}
