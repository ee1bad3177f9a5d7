/* Record predicates in C: a `where` program (see spdecode.h) checked and compiled once into a node array, then
 * matched against each record the decoder walks, before it writes any column for it. The semantics are those
 * of core/predicate.py's `matches`, which the contract tests hold this file to. */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "spdecode.h"

enum { K_AND = 1, K_OR = 2, K_NOT = 3, K_TEST = 4 };
enum { S_KEY = 1, S_VALUE = 2, S_TIMESTAMP = 3, S_PARTITION = 4, S_HEADER = 5, S_SLICE = 6 };
enum { O_EQ = 1, O_NE, O_PREFIX, O_IN, O_CONTAINS, O_EXISTS, O_LT, O_LE, O_GT, O_GE };

#define MAX_NODES 4096  /* the grammar allows 64 tests; the rest is room for and, or and not */
#define MAX_DEPTH 64
#define MAX_VALUES 65536

typedef struct {
    uint8_t kind, subject, op;
    uint32_t size;    /* nodes in this subtree, itself included: a sibling is `size` nodes on */
    uint32_t n;       /* children of and / or */
    sp_span name;     /* header name */
    uint32_t first;   /* its values: vals[first .. first + nvalues) (ints for numbers) */
    uint32_t nvalues;
} pnode;

struct sp_where {
    uint8_t *program; /* owned copy: names and values point into it */
    pnode *nodes;
    size_t nnodes, cap_nodes;
    sp_span *vals;
    int64_t *ints;
    size_t nvals, cap_vals;
};

/* -- compiling -------------------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p, *start, *end;
    sp_where *w;
    char *msg;
    size_t msglen;
} reader;

static int refuse(reader *rd, const char *what) {
    snprintf(rd->msg, rd->msglen, "where program, byte %zu: %s", (size_t)(rd->p - rd->start), what);
    return SP_ERR_CORRUPT;
}

static int take(reader *rd, size_t n, const uint8_t **out) {
    if ((size_t)(rd->end - rd->p) < n) return -1;
    *out = rd->p;
    rd->p += n;
    return 0;
}

static int u8(reader *rd, uint8_t *v) {
    const uint8_t *p;
    if (take(rd, 1, &p)) return -1;
    *v = p[0];
    return 0;
}

static int u16(reader *rd, uint32_t *v) {
    const uint8_t *p;
    if (take(rd, 2, &p)) return -1;
    *v = (uint32_t)p[0] | (uint32_t)p[1] << 8;
    return 0;
}

static int u32(reader *rd, uint32_t *v) {
    const uint8_t *p;
    if (take(rd, 4, &p)) return -1;
    *v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return 0;
}

static int i64(reader *rd, int64_t *v) {
    const uint8_t *p;
    if (take(rd, 8, &p)) return -1;
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = (x << 8) | p[i];
    *v = (int64_t)x;
    return 0;
}

/* Which ops a subject takes, as the grammar says. */
static int allowed(uint8_t subject, uint8_t op) {
    switch (subject) {
    case S_KEY:
    case S_HEADER: return op == O_EQ || op == O_NE || op == O_PREFIX || op == O_IN || op == O_EXISTS;
    case S_VALUE: return op == O_PREFIX || op == O_CONTAINS;
    case S_TIMESTAMP: return op == O_EQ || op == O_NE || (op >= O_LT && op <= O_GE);
    case S_PARTITION: return op == O_EQ || op == O_NE || op == O_IN;
    case S_SLICE: return op == O_EQ || op == O_NE || op == O_IN || (op >= O_LT && op <= O_GE);
    default: return 0;
    }
}

static int add_node(reader *rd, size_t *index) {
    sp_where *w = rd->w;
    if (w->nnodes >= MAX_NODES) return refuse(rd, "more than 4096 nodes");
    if (w->nnodes == w->cap_nodes) {
        size_t cap = w->cap_nodes ? w->cap_nodes * 2 : 16;
        pnode *nodes = realloc(w->nodes, cap * sizeof *nodes);
        if (!nodes) return SP_ERR_NOMEM;
        w->nodes = nodes;
        w->cap_nodes = cap;
    }
    memset(&w->nodes[w->nnodes], 0, sizeof w->nodes[0]);
    *index = w->nnodes++;
    return SP_OK;
}

static int add_value(reader *rd, size_t *index) {
    sp_where *w = rd->w;
    if (w->nvals >= MAX_VALUES) return refuse(rd, "more than 65536 values");
    if (w->nvals == w->cap_vals) {
        size_t cap = w->cap_vals ? w->cap_vals * 2 : 16;
        sp_span *vals = realloc(w->vals, cap * sizeof *vals);
        if (!vals) return SP_ERR_NOMEM;
        w->vals = vals;
        int64_t *ints = realloc(w->ints, cap * sizeof *ints);
        if (!ints) return SP_ERR_NOMEM;
        w->ints = ints;
        w->cap_vals = cap;
    }
    w->vals[w->nvals] = (sp_span){NULL, 0};
    w->ints[w->nvals] = 0;
    *index = w->nvals++;
    return SP_OK;
}

static int parse_test(reader *rd, size_t at) {
    uint8_t subject, op;
    if (u8(rd, &subject) || u8(rd, &op)) return refuse(rd, "a test ends early");
    if (subject < S_KEY || subject > S_SLICE) return refuse(rd, "unknown subject");
    if (!allowed(subject, op)) return refuse(rd, "an operator its subject does not take");
    sp_span name = {NULL, 0};
    if (subject == S_HEADER) {
        uint32_t len;
        const uint8_t *data;
        if (u16(rd, &len) || take(rd, len, &data)) return refuse(rd, "a header name ends early");
        name = (sp_span){data, (int64_t)len};
    }
    uint32_t count;
    if (u16(rd, &count)) return refuse(rd, "a test's value count ends early");
    if (op == O_EXISTS ? count != 0 : op == O_IN ? count == 0 : count != 1)
        return refuse(rd, "a test with the wrong number of values");
    uint32_t first = (uint32_t)rd->w->nvals;
    int numbers = subject == S_TIMESTAMP || subject == S_PARTITION || subject == S_SLICE;
    for (uint32_t i = 0; i < count; i++) {
        size_t v;
        int rc = add_value(rd, &v);
        if (rc) return rc;
        if (numbers) {
            if (i64(rd, &rd->w->ints[v])) return refuse(rd, "a number ends early");
        } else {
            uint32_t len;
            const uint8_t *data;
            if (u32(rd, &len) || take(rd, len, &data)) return refuse(rd, "a value ends early");
            rd->w->vals[v] = (sp_span){data, (int64_t)len};
        }
    }
    pnode *n = &rd->w->nodes[at];
    n->subject = subject;
    n->op = op;
    n->name = name;
    n->first = first;
    n->nvalues = count;
    return SP_OK;
}

static int parse_node(reader *rd, int depth) {
    if (depth > MAX_DEPTH) return refuse(rd, "nested more than 64 deep");
    uint8_t kind;
    if (u8(rd, &kind)) return refuse(rd, "a node ends early");
    size_t at;
    int rc = add_node(rd, &at);
    if (rc) return rc;
    rd->w->nodes[at].kind = kind;
    uint32_t children = 0;
    switch (kind) {
    case K_AND:
    case K_OR:
        if (u16(rd, &children)) return refuse(rd, "an and / or ends early");
        if (children == 0) return refuse(rd, "an and / or of nothing");
        break;
    case K_NOT: children = 1; break;
    case K_TEST:
        if ((rc = parse_test(rd, at))) return rc;
        break;
    default: return refuse(rd, "unknown node kind");
    }
    for (uint32_t i = 0; i < children; i++)
        if ((rc = parse_node(rd, depth + 1))) return rc;
    rd->w->nodes[at].n = children;
    rd->w->nodes[at].size = (uint32_t)(rd->w->nnodes - at);
    return SP_OK;
}

void sp_where_free(sp_where *w) {
    if (!w) return;
    free(w->program);
    free(w->nodes);
    free(w->vals);
    free(w->ints);
    free(w);
}

int sp_where_compile(const uint8_t *program, size_t len, sp_where **out, char *msg, size_t msglen) {
    *out = NULL;
    sp_where *w = calloc(1, sizeof *w);
    if (!w || !(w->program = malloc(len ? len : 1))) {
        free(w);
        snprintf(msg, msglen, "out of memory");
        return SP_ERR_NOMEM;
    }
    if (len) memcpy(w->program, program, len);
    reader rd = {w->program, w->program, w->program + len, w, msg, msglen};
    int rc = parse_node(&rd, 0);
    if (rc == SP_OK && rd.p != rd.end) rc = refuse(&rd, "bytes after the predicate");
    if (rc == SP_ERR_NOMEM) snprintf(msg, msglen, "out of memory");
    if (rc != SP_OK) {
        sp_where_free(w);
        return rc;
    }
    *out = w;
    return SP_OK;
}

/* -- matching --------------------------------------------------------------------------------------------- */

/* Equal bytes; names and values a predicate tests are mostly a few bytes long, shorter than what a call to
 * memcmp costs to set up, so those are compared in place. */
static inline int equal_bytes(const uint8_t *a, const uint8_t *b, size_t n) {
    if (n > 16) return memcmp(a, b, n) == 0;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static int same(sp_span a, sp_span b) {
    return a.len == b.len && (a.len <= 0 || equal_bytes(a.data, b.data, (size_t)a.len));
}

static int starts(sp_span a, sp_span prefix) {
    return a.len >= prefix.len && (prefix.len <= 0 || equal_bytes(a.data, prefix.data, (size_t)prefix.len));
}

/* One found (non-null) bytes value against =, ^= or in. */
static int bytes_hit(const sp_where *w, const pnode *n, sp_span found) {
    switch (n->op) {
    case O_EQ:
    case O_NE: return same(found, w->vals[n->first]);
    case O_PREFIX: return starts(found, w->vals[n->first]);
    default:
        for (uint32_t i = 0; i < n->nvalues; i++)
            if (same(found, w->vals[n->first + i])) return 1;
        return 0;
    }
}

static int number_test(const sp_where *w, const pnode *n, int64_t x) {
    int64_t bound = w->ints[n->first];
    switch (n->op) {
    case O_EQ: return x == bound;
    case O_NE: return x != bound;
    case O_LT: return x < bound;
    case O_LE: return x <= bound;
    case O_GT: return x > bound;
    case O_GE: return x >= bound;
    default:
        for (uint32_t i = 0; i < n->nvalues; i++)
            if (x == w->ints[n->first + i]) return 1;
        return 0;
    }
}

/* A record's key hash (see spdecode.h): zlib's CRC-32 of its key, or of its offset, big-endian, without one. */
static int64_t slice_hash(const sp_record_view *r) {
    if (r->key.len >= 0) {
        uLong crc = crc32(0L, Z_NULL, 0);
        const uint8_t *p = r->key.data;
        int64_t left = r->key.len;
        while (left > 0) { /* zlib takes at most UINT_MAX bytes a call */
            uInt n = left > (int64_t)0x40000000 ? 0x40000000u : (uInt)left;
            crc = crc32(crc, p, n);
            p += n;
            left -= n;
        }
        return (int64_t)(crc & 0xffffffffu);
    }
    uint8_t be[8];
    uint64_t x = (uint64_t)r->offset;
    for (int i = 7; i >= 0; i--, x >>= 8) be[i] = (uint8_t)x;
    return (int64_t)(crc32(crc32(0L, Z_NULL, 0), be, 8) & 0xffffffffu);
}

static int test(const sp_where *w, const pnode *n, const sp_record_view *r) {
    switch (n->subject) {
    case S_KEY: {
        if (n->op == O_EXISTS) return r->key.len >= 0;
        int hit = r->key.len >= 0 && bytes_hit(w, n, r->key);
        return n->op == O_NE ? !hit : hit;
    }
    case S_HEADER: {
        int present = 0, hit = 0;
        for (size_t i = 0; i < r->nheaders && !hit; i++) {
            if (!same(r->headers[i].key, n->name)) continue;
            present = 1;
            if (r->headers[i].value.len >= 0 && n->op != O_EXISTS) hit = bytes_hit(w, n, r->headers[i].value);
        }
        if (n->op == O_EXISTS) return present;
        return n->op == O_NE ? !hit : hit;
    }
    case S_VALUE: {
        sp_span data = r->value.len >= 0 ? r->value : (sp_span){NULL, 0};
        sp_span needle = w->vals[n->first];
        if (n->op == O_PREFIX) return starts(data, needle);
        if (needle.len == 0) return 1;
        return data.len >= needle.len && memmem(data.data, (size_t)data.len, needle.data, (size_t)needle.len) != NULL;
    }
    case S_TIMESTAMP: return number_test(w, n, r->timestamp);
    case S_SLICE: return number_test(w, n, slice_hash(r));
    default: return number_test(w, n, r->partition);
    }
}

static int match_at(const sp_where *w, size_t i, const sp_record_view *r) {
    const pnode *n = &w->nodes[i];
    switch (n->kind) {
    case K_TEST: return test(w, n, r);
    case K_NOT: return !match_at(w, i + 1, r);
    default: {
        int any = n->kind == K_OR;
        size_t child = i + 1;
        for (uint32_t k = 0; k < n->n; k++) {
            if (match_at(w, child, r) == any) return any; /* or: the first true; and: the first false */
            child += w->nodes[child].size;
        }
        return !any;
    }
    }
}

int sp_where_match(const sp_where *w, const sp_record_view *record) {
    return w == NULL || match_at(w, 0, record);
}
