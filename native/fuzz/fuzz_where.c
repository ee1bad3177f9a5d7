/* libFuzzer harness over record predicates: the first byte is the length of a program (its low 7 bits) and
 * its part (its high bit: 0 a `where`, 1 a `mine`, which leaves out another reader's records as foreign),
 * the program follows, then a record set. A program that compiles is matched against every record the decoder
 * walks; besides crashes and sanitizer reports, it traps when the records emitted and the records left out
 * do not add up to what the same record set decodes to without the predicate. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/spdecode.h"

#define CHECK(cond)                  \
    do {                             \
        if (!(cond)) __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t plen = data[0] & 0x7f;
    int as_mine = data[0] >> 7;
    if (size < 1 + plen) return 0;
    const uint8_t *records = data + 1 + plen;
    size_t rlen = size - 1 - plen;
    sp_where *where = NULL;
    char msg[200];
    int compiled = sp_where_compile(data + 1, plen, &where, msg, sizeof msg);
    CHECK((compiled == SP_OK) == (where != NULL));
    if (compiled != SP_OK) {
        CHECK(memchr(msg, 0, sizeof msg) != NULL && msg[0] != 0);
        return 0;
    }
    sp_result all, some;
    sp_result_init(&all);
    sp_result_init(&some);
    int rc_all = sp_decode(records, rlen, 1 << 20, 0, NULL, 0, INT64_MIN, &all);
    int rc_some = sp_decode_where(records, rlen, 1 << 20, 0, NULL, 0, INT64_MIN, as_mine ? NULL : where,
                                  as_mine ? where : NULL, 3, &some);
    CHECK(rc_all == rc_some);
    CHECK(all.filtered == 0 && all.foreign == 0);
    CHECK(as_mine ? some.filtered == 0 : some.foreign == 0);
    size_t left_out = as_mine ? some.foreign : some.filtered;
    sp_buf *runs = as_mine ? &some.foreign_ranges : &some.filtered_ranges;
    CHECK(some.count + left_out == all.count);
    CHECK(some.nbatches == all.nbatches && some.consumed == all.consumed);
    CHECK(some.offsets.len == 8 * some.count);
    /* the ranges left out add up to the count left out (hostile offsets may go back or wrap: no order) */
    CHECK(runs->len % 16 == 0);
    uint64_t in_ranges = 0;
    for (size_t i = 0; i < runs->len; i += 16) {
        int64_t start, end;
        memcpy(&start, runs->data + i, 8);
        memcpy(&end, runs->data + i + 8, 8);
        CHECK((uint64_t)end - (uint64_t)start >= 1);
        in_ranges += (uint64_t)end - (uint64_t)start;
    }
    CHECK(in_ranges == left_out);
    /* what was emitted is a subsequence of the unfiltered offsets, in order */
    size_t j = 0;
    for (size_t i = 0; i < some.count; i++) {
        int64_t want;
        int found = 0;
        memcpy(&want, some.offsets.data + 8 * i, 8);
        while (j < all.count && !found) {
            int64_t have;
            memcpy(&have, all.offsets.data + 8 * j++, 8);
            found = have == want;
        }
        CHECK(found);
    }
    sp_result_free(&all);
    sp_result_free(&some);
    sp_where_free(where);
    return 0;
}
