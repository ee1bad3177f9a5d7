/* CRC32C (Castagnoli), as Kafka's RecordBatch v2 uses: SSE4.2's crc32 instruction when the CPU has it,
 * slicing-by-8 tables otherwise. */
#include "spdecode.h"

#include <string.h>

#define POLY 0x82F63B78u

static uint32_t table[8][256];
static int table_ready = 0;

static void build_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
    table_ready = 1;
}

uint32_t sp_crc32c_sw(uint32_t crc, const uint8_t *p, size_t len) {
    if (!table_ready) build_table(); /* idempotent: racing threads write the same values */
    crc = ~crc;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        v ^= crc; /* little-endian */
        crc = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^ table[5][(v >> 16) & 0xff] ^
              table[4][(v >> 24) & 0xff] ^ table[3][(v >> 32) & 0xff] ^ table[2][(v >> 40) & 0xff] ^
              table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, size_t len) {
    uint64_t c = ~crc;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--) c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}

int sp_crc32c_hw_available(void) { return __builtin_cpu_supports("sse4.2"); }

uint32_t sp_crc32c(uint32_t crc, const uint8_t *p, size_t len) {
    static int hw = -1;
    if (hw < 0) hw = sp_crc32c_hw_available();
    return hw ? crc32c_hw(crc, p, len) : sp_crc32c_sw(crc, p, len);
}
#else
int sp_crc32c_hw_available(void) { return 0; }
uint32_t sp_crc32c(uint32_t crc, const uint8_t *p, size_t len) { return sp_crc32c_sw(crc, p, len); }
#endif
