/* libFuzzer harness over record predicates: the first byte is the length of a `where` program, the program
 * follows, then a record set. A program that compiles is matched against every record the decoder walks;
 * besides crashes and sanitizer reports, it traps when the records emitted and the records left out do not
 * add up to what the same record set decodes to without the predicate. */
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
    size_t plen = data[0];
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
    int rc_some = sp_decode_where(records, rlen, 1 << 20, 0, NULL, 0, INT64_MIN, where, 3, &some);
    CHECK(rc_all == rc_some);
    CHECK(all.filtered == 0);
    CHECK(some.count + some.filtered == all.count);
    CHECK(some.nbatches == all.nbatches && some.consumed == all.consumed);
    CHECK(some.offsets.len == 8 * some.count);
    /* the ranges left out add up to the count left out (hostile offsets may go back or wrap: no order) */
    CHECK(some.filtered_ranges.len % 16 == 0);
    uint64_t in_ranges = 0;
    for (size_t i = 0; i < some.filtered_ranges.len; i += 16) {
        int64_t start, end;
        memcpy(&start, some.filtered_ranges.data + i, 8);
        memcpy(&end, some.filtered_ranges.data + i + 8, 8);
        CHECK((uint64_t)end - (uint64_t)start >= 1);
        in_ranges += (uint64_t)end - (uint64_t)start;
    }
    CHECK(in_ranges == some.filtered);
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
