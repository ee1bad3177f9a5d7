/* Python glue for the decoder core: `decode_columns` returns the columns as zero-copy buffers, and the
 * Python package (streamplane.native) turns them into batches, Arrow arrays and errors. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <string.h>

#include <structmember.h>

#include "lanes.h"
#include "spdecode.h"

/* Record sets at least this large (compressed) decode with the GIL released. */
#define RELEASE_GIL_FROM (64 * 1024)

/* -- Buffer: owns one malloc'd block and exposes it through the buffer protocol ---------------------------- */

typedef struct {
    PyObject_HEAD
    uint8_t *data;
    Py_ssize_t len;
    Py_ssize_t exports;
} Buffer;

static void Buffer_dealloc(Buffer *self) {
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Buffer_getbuffer(Buffer *self, Py_buffer *view, int flags) {
    int rc = PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : (uint8_t *)"", self->len, 1, flags);
    if (rc == 0) self->exports++;
    return rc;
}

static void Buffer_releasebuffer(Buffer *self, Py_buffer *view) {
    (void)view;
    self->exports--;
}

static Py_ssize_t Buffer_length(Buffer *self) { return self->len; }

static PyBufferProcs Buffer_as_buffer = {(getbufferproc)Buffer_getbuffer, (releasebufferproc)Buffer_releasebuffer};
static PySequenceMethods Buffer_as_sequence = {.sq_length = (lenfunc)Buffer_length};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "streamplane._native.Buffer",
    .tp_basicsize = sizeof(Buffer),
    .tp_dealloc = (destructor)Buffer_dealloc,
    .tp_as_buffer = &Buffer_as_buffer,
    .tp_as_sequence = &Buffer_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Read-only bytes owned by the decoder (buffer protocol; wrap in memoryview or pyarrow.py_buffer).",
};

/* Hand a buffer's block over to a new Buffer object (the sp_buf is emptied). */
static PyObject *take(sp_buf *b) {
    Buffer *obj = PyObject_New(Buffer, &BufferType);
    if (!obj) return NULL;
    obj->data = b->data;
    obj->len = (Py_ssize_t)b->len;
    obj->exports = 0;
    b->data = NULL;
    b->len = b->cap = 0;
    return (PyObject *)obj;
}

/* The batches' facts as one buffer of BATCH_FIELDS int64s a batch (BatchInfo's field order), not a tuple a batch:
 * a busy response has thousands of batches, and building their tuples held the GIL longer than decoding them. */
#define BATCH_FIELDS 18
static PyObject *batch_rows(const sp_result *r) {
    sp_buf rows = {0};
    size_t n = r->nbatches * BATCH_FIELDS;
    rows.data = malloc((n ? n : 1) * sizeof(int64_t));
    if (!rows.data) return PyErr_NoMemory();
    rows.len = rows.cap = n * sizeof(int64_t);
    int64_t *row = (int64_t *)rows.data;
    for (size_t i = 0; i < r->nbatches; i++, row += BATCH_FIELDS) {
        const sp_batch_info *b = &r->batches[i];
        int64_t fields[BATCH_FIELDS] = {b->base_offset,     b->last_offset,  b->partition_leader_epoch, b->first_timestamp,
                                        b->max_timestamp,   b->producer_id,  b->producer_epoch,         b->base_sequence,
                                        b->record_count,    b->attributes,   b->codec,                  b->transactional,
                                        b->control,         b->aborted,      b->log_append_time,        b->position,
                                        b->compressed_size, b->decompressed_size};
        memcpy(row, fields, sizeof fields);
    }
    PyObject *out = take(&rows);
    if (!out) free(rows.data);
    return out;
}

static int set_item(PyObject *d, const char *key, PyObject *value) {
    if (!value) return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

/* -- record predicates: a compiled `where` program, held by a capsule ----------------------------------------- */

#define WHERE_CAPSULE "streamplane._native.where"

static void where_destroy(PyObject *capsule) { sp_where_free(PyCapsule_GetPointer(capsule, WHERE_CAPSULE)); }

static PyObject *compile_where(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer program;
    if (!PyArg_ParseTuple(args, "y*", &program)) return NULL;
    sp_where *w = NULL;
    char msg[200];
    int rc = sp_where_compile(program.buf, (size_t)program.len, &w, msg, sizeof msg);
    PyBuffer_Release(&program);
    if (rc == SP_ERR_NOMEM) return PyErr_NoMemory();
    if (rc != SP_OK) {
        PyErr_SetString(PyExc_ValueError, msg);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(w, WHERE_CAPSULE, where_destroy);
    if (!capsule) sp_where_free(w);
    return capsule;
}

static PyObject *decode_columns(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"data", "max_decompressed", "verify_crc", "aborted", "min_offset", "where", "partition",
                             "mine", NULL};
    Py_buffer in;
    Py_ssize_t max_decompressed;
    int verify_crc = 1;
    PyObject *aborted_obj = Py_None, *where_obj = Py_None, *mine_obj = Py_None;
    long long min_offset = INT64_MIN, partition = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*n|pOLOLO", kwlist, &in, &max_decompressed, &verify_crc,
                                     &aborted_obj, &min_offset, &where_obj, &partition, &mine_obj))
        return NULL;
    sp_aborted_txn *aborted = NULL;
    Py_ssize_t naborted = 0;
    PyObject *result = NULL;
    const sp_where *where = NULL, *mine = NULL;
    if (max_decompressed <= 0) {
        PyErr_SetString(PyExc_ValueError, "max_decompressed must be a positive number of bytes");
        goto out;
    }
    if (where_obj != Py_None) {
        if (!PyCapsule_IsValid(where_obj, WHERE_CAPSULE)) {
            PyErr_SetString(PyExc_TypeError, "where must be a predicate compiled by compile_where");
            goto out;
        }
        where = PyCapsule_GetPointer(where_obj, WHERE_CAPSULE);
    }
    if (mine_obj != Py_None) {
        if (!PyCapsule_IsValid(mine_obj, WHERE_CAPSULE)) {
            PyErr_SetString(PyExc_TypeError, "mine must be a predicate compiled by compile_where");
            goto out;
        }
        mine = PyCapsule_GetPointer(mine_obj, WHERE_CAPSULE);
    }
    if (aborted_obj != Py_None) {
        PyObject *seq = PySequence_Fast(aborted_obj, "aborted must be a sequence of (producer_id, first_offset)");
        if (!seq) goto out;
        naborted = PySequence_Fast_GET_SIZE(seq);
        aborted = malloc((size_t)(naborted ? naborted : 1) * sizeof *aborted);
        if (!aborted) { Py_DECREF(seq); PyErr_NoMemory(); goto out; }
        for (Py_ssize_t i = 0; i < naborted; i++) {
            long long pid, first;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "LL;aborted entries are (producer_id, first_offset)",
                                  &pid, &first)) {
                Py_DECREF(seq);
                goto out;
            }
            aborted[i].producer_id = pid;
            aborted[i].first_offset = first;
        }
        Py_DECREF(seq);
    }

    sp_result r;
    sp_result_init(&r);
    /* Other threads may run while a large record set decodes. A small one decodes in far less than the
       interpreter's switch interval, and handing the GIL back and forth would cost the caller more than
       that: a worker decodes one small set per partition, thousands per second. */
    if (in.len >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        sp_decode_where(in.buf, (size_t)in.len, (size_t)max_decompressed, verify_crc,
                        aborted_obj == Py_None ? NULL : aborted, (size_t)naborted, (int64_t)min_offset, where,
                        mine, (int64_t)partition, &r);
        Py_END_ALLOW_THREADS
    } else {
        sp_decode_where(in.buf, (size_t)in.len, (size_t)max_decompressed, verify_crc,
                        aborted_obj == Py_None ? NULL : aborted, (size_t)naborted, (int64_t)min_offset, where,
                        mine, (int64_t)partition, &r);
    }

    result = PyDict_New();
    PyObject *batches = batch_rows(&r);
    if (!result || !batches) { Py_XDECREF(batches); Py_CLEAR(result); sp_result_free(&r); goto out; }
    PyObject *error = Py_None;
    Py_INCREF(Py_None);
    if (r.stop == SP_STOP_ERROR) {
        Py_DECREF(Py_None);
        error = Py_BuildValue("(isLLLLL)", r.err_kind, r.err_msg, (long long)r.err_position,
                              (long long)r.err_base_offset, (long long)r.err_last_offset, (long long)r.err_size,
                              (long long)r.err_limit);
    }
    if (set_item(result, "count", PyLong_FromSize_t(r.count)) ||
        set_item(result, "filtered", PyLong_FromSize_t(r.filtered)) ||
        set_item(result, "filtered_ranges", take(&r.filtered_ranges)) ||
        set_item(result, "foreign", PyLong_FromSize_t(r.foreign)) ||
        set_item(result, "foreign_ranges", take(&r.foreign_ranges)) || set_item(result, "offsets", take(&r.offsets)) ||
        set_item(result, "timestamps", take(&r.timestamps)) || set_item(result, "key_offsets", take(&r.key_offsets)) ||
        set_item(result, "keys", take(&r.keys)) || set_item(result, "key_valid", take(&r.key_valid)) ||
        set_item(result, "value_offsets", take(&r.value_offsets)) || set_item(result, "values", take(&r.values)) ||
        set_item(result, "value_valid", take(&r.value_valid)) ||
        set_item(result, "header_offsets", take(&r.header_offsets)) ||
        set_item(result, "header_count", PyLong_FromSize_t(r.header_count)) ||
        set_item(result, "hkey_offsets", take(&r.hkey_offsets)) || set_item(result, "hkeys", take(&r.hkeys)) ||
        set_item(result, "hvalue_offsets", take(&r.hvalue_offsets)) ||
        set_item(result, "hvalues", take(&r.hvalues)) || set_item(result, "hvalue_valid", take(&r.hvalue_valid)) ||
        set_item(result, "batches", batches) || set_item(result, "next_offset", PyLong_FromLongLong(r.next_offset)) ||
        set_item(result, "consumed", PyLong_FromSize_t(r.consumed)) ||
        set_item(result, "stop", PyLong_FromLong(r.stop)) || set_item(result, "error", error))
        Py_CLEAR(result);
    sp_result_free(&r);
out:
    free(aborted);
    PyBuffer_Release(&in);
    return result;
}

/* -- records: light Python objects over the columns ----------------------------------------------------------
 * A RecordSet holds buffer views of one decode result's columns; each Record is (RecordSet, index) and builds
 * its fields only when they are read, so a record costs one small allocation until the application looks. */

enum { C_OFF, C_TS, C_KO, C_K, C_KV, C_VO, C_V, C_VV, C_HO, C_HKO, C_HK, C_HVO, C_HV, C_HVV, C_N };
static const char *column_names[C_N] = {"offsets",      "timestamps",   "key_offsets", "keys",          "key_valid",
                                        "value_offsets", "values",       "value_valid", "header_offsets", "hkey_offsets",
                                        "hkeys",        "hvalue_offsets", "hvalues",    "hvalue_valid"};

typedef struct {
    PyObject_HEAD
    Py_buffer v[C_N];
    int held;
    Py_ssize_t count, header_count;
} RecordSet;

static void RecordSet_dealloc(RecordSet *self) {
    for (int i = 0; i < self->held; i++) PyBuffer_Release(&self->v[i]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject RecordSetType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "streamplane._native.RecordSet",
    .tp_basicsize = sizeof(RecordSet),
    .tp_dealloc = (destructor)RecordSet_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The columns shared by the records of one decode call.",
};

static inline int32_t at32(const Py_buffer *v, Py_ssize_t i) {
    int32_t x;
    memcpy(&x, (const char *)v->buf + 4 * i, 4);
    return x;
}
static inline int64_t at64(const Py_buffer *v, Py_ssize_t i) {
    int64_t x;
    memcpy(&x, (const char *)v->buf + 8 * i, 8);
    return x;
}
static inline int bit(const Py_buffer *v, Py_ssize_t i) { return (((const uint8_t *)v->buf)[i >> 3] >> (i & 7)) & 1; }

/* Check once that every offset column is in bounds, so field access needs no checks. */
static int offsets_ok(const Py_buffer *offsets, Py_ssize_t n, const Py_buffer *data) {
    if (offsets->len < 4 * (n + 1)) return 0;
    int32_t prev = 0;
    for (Py_ssize_t i = 0; i <= n; i++) {
        int32_t x = at32(offsets, i);
        if (x < prev || (i == 0 && x != 0)) return 0;
        prev = x;
    }
    return data == NULL || (Py_ssize_t)prev <= data->len;
}

static RecordSet *recordset_new(PyObject *columns) {
    if (!PyDict_Check(columns)) {
        PyErr_SetString(PyExc_TypeError, "records() takes the columns dict of decode_columns");
        return NULL;
    }
    RecordSet *rs = PyObject_New(RecordSet, &RecordSetType);
    if (!rs) return NULL;
    rs->held = 0;
    PyObject *count = PyDict_GetItemString(columns, "count"), *hcount = PyDict_GetItemString(columns, "header_count");
    rs->count = count ? PyLong_AsSsize_t(count) : -1;
    rs->header_count = hcount ? PyLong_AsSsize_t(hcount) : -1;
    for (int i = 0; i < C_N; i++) {
        PyObject *obj = PyDict_GetItemString(columns, column_names[i]);
        if (!obj) {
            PyErr_Format(PyExc_KeyError, "columns lack %s", column_names[i]);
            goto fail;
        }
        if (PyObject_GetBuffer(obj, &rs->v[i], PyBUF_SIMPLE) < 0) goto fail;
        rs->held++;
    }
    Py_ssize_t n = rs->count, h = rs->header_count;
    if (n < 0 || h < 0 || rs->v[C_OFF].len < 8 * n || rs->v[C_TS].len < 8 * n || rs->v[C_KV].len < (n + 7) / 8 ||
        rs->v[C_VV].len < (n + 7) / 8 || rs->v[C_HVV].len < (h + 7) / 8 || !offsets_ok(&rs->v[C_KO], n, &rs->v[C_K]) ||
        !offsets_ok(&rs->v[C_VO], n, &rs->v[C_V]) || !offsets_ok(&rs->v[C_HO], n, NULL) ||
        at32(&rs->v[C_HO], n) != h || !offsets_ok(&rs->v[C_HKO], h, &rs->v[C_HK]) ||
        !offsets_ok(&rs->v[C_HVO], h, &rs->v[C_HV])) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "columns are inconsistent");
        goto fail;
    }
    return rs;
fail:
    Py_DECREF(rs);
    return NULL;
}

static PyObject *slice(const Py_buffer *offsets, const Py_buffer *data, const Py_buffer *validity, Py_ssize_t i) {
    if (validity && !bit(validity, i)) Py_RETURN_NONE;
    int32_t a = at32(offsets, i);
    return PyBytes_FromStringAndSize((const char *)data->buf + a, at32(offsets, i + 1) - a);
}

typedef struct {
    PyObject_HEAD
    RecordSet *set;
    Py_ssize_t index;
} Record;

static void Record_dealloc(Record *self) {
    Py_DECREF(self->set);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Record_offset(Record *r, void *c) {
    (void)c;
    return PyLong_FromLongLong(at64(&r->set->v[C_OFF], r->index));
}
static PyObject *Record_timestamp(Record *r, void *c) {
    (void)c;
    return PyLong_FromLongLong(at64(&r->set->v[C_TS], r->index));
}
static PyObject *Record_key(Record *r, void *c) {
    (void)c;
    return slice(&r->set->v[C_KO], &r->set->v[C_K], &r->set->v[C_KV], r->index);
}
static PyObject *Record_value(Record *r, void *c) {
    (void)c;
    return slice(&r->set->v[C_VO], &r->set->v[C_V], &r->set->v[C_VV], r->index);
}
static PyObject *Record_headers(Record *r, void *c) {
    (void)c;
    const RecordSet *s = r->set;
    int32_t h0 = at32(&s->v[C_HO], r->index), h1 = at32(&s->v[C_HO], r->index + 1);
    PyObject *headers = PyTuple_New(h1 - h0);
    for (int32_t j = h0; headers && j < h1; j++) {
        int32_t a = at32(&s->v[C_HKO], j);
        PyObject *hk = PyUnicode_DecodeUTF8((const char *)s->v[C_HK].buf + a, at32(&s->v[C_HKO], j + 1) - a, "replace");
        PyObject *hv = hk ? slice(&s->v[C_HVO], &s->v[C_HV], &s->v[C_HVV], j) : NULL;
        PyObject *pair = (hk && hv) ? PyTuple_Pack(2, hk, hv) : NULL;
        Py_XDECREF(hk);
        Py_XDECREF(hv);
        if (!pair) {
            Py_CLEAR(headers);
            break;
        }
        PyTuple_SET_ITEM(headers, j - h0, pair);
    }
    return headers;
}

static PyGetSetDef Record_getset[] = {
    {"offset", (getter)Record_offset, NULL, "the record's offset", NULL},
    {"timestamp", (getter)Record_timestamp, NULL, "milliseconds since the epoch", NULL},
    {"key", (getter)Record_key, NULL, "bytes, or None", NULL},
    {"value", (getter)Record_value, NULL, "bytes, or None", NULL},
    {"headers", (getter)Record_headers, NULL, "tuple of (key str, value bytes or None)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* (offset, timestamp, key, value, headers): for comparison, repr and unpacking. */
static PyObject *Record_astuple(Record *r, PyObject *unused) {
    (void)unused;
    PyObject *f[5] = {Record_offset(r, NULL), Record_timestamp(r, NULL), Record_key(r, NULL), Record_value(r, NULL),
                      Record_headers(r, NULL)};
    PyObject *t = (f[0] && f[1] && f[2] && f[3] && f[4]) ? PyTuple_Pack(5, f[0], f[1], f[2], f[3], f[4]) : NULL;
    for (int i = 0; i < 5; i++) Py_XDECREF(f[i]);
    return t;
}

static PyObject *Record_richcompare(PyObject *a, PyObject *b, int op);

static PyObject *Record_repr(Record *r) {
    PyObject *t = Record_astuple(r, NULL);
    if (!t) return NULL;
    PyObject *s = PyUnicode_FromFormat("Record(offset=%R, timestamp=%R, key=%R, value=%R, headers=%R)",
                                       PyTuple_GET_ITEM(t, 0), PyTuple_GET_ITEM(t, 1), PyTuple_GET_ITEM(t, 2),
                                       PyTuple_GET_ITEM(t, 3), PyTuple_GET_ITEM(t, 4));
    Py_DECREF(t);
    return s;
}

static PyObject *Record_iter(Record *r) {
    PyObject *t = Record_astuple(r, NULL);
    if (!t) return NULL;
    PyObject *it = PyObject_GetIter(t);
    Py_DECREF(t);
    return it;
}

static PyMethodDef Record_methods[] = {
    {"astuple", (PyCFunction)Record_astuple, METH_NOARGS, "(offset, timestamp, key, value, headers)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RecordType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "streamplane.native.Record",
    .tp_basicsize = sizeof(Record),
    .tp_dealloc = (destructor)Record_dealloc,
    .tp_repr = (reprfunc)Record_repr,
    .tp_richcompare = Record_richcompare,
    .tp_iter = (getiterfunc)Record_iter,
    .tp_getset = Record_getset,
    .tp_methods = Record_methods,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One decoded record: offset, timestamp (ms), key, value, headers; fields are built when read.",
};

/* Equal to another Record or to any tuple of the same five fields (such as PyRecord). */
static PyObject *Record_richcompare(PyObject *a, PyObject *b, int op) {
    if (op != Py_EQ && op != Py_NE) Py_RETURN_NOTIMPLEMENTED;
    PyObject *ta = PyObject_TypeCheck(a, &RecordType) ? Record_astuple((Record *)a, NULL) : (Py_INCREF(a), a);
    PyObject *tb = PyObject_TypeCheck(b, &RecordType) ? Record_astuple((Record *)b, NULL) : (Py_INCREF(b), b);
    PyObject *result = NULL;
    if (ta && tb) {
        if (PyTuple_Check(ta) && PyTuple_Check(tb)) result = PyObject_RichCompare(ta, tb, op);
        else {
            result = Py_NotImplemented;
            Py_INCREF(result);
        }
    }
    Py_XDECREF(ta);
    Py_XDECREF(tb);
    return result;
}

static PyObject *records(PyObject *self, PyObject *columns) {
    (void)self;
    RecordSet *set = recordset_new(columns);
    if (!set) return NULL;
    PyObject *list = PyList_New(set->count);
    for (Py_ssize_t i = 0; list && i < set->count; i++) {
        Record *r = PyObject_New(Record, &RecordType);
        if (!r) {
            Py_CLEAR(list);
            break;
        }
        Py_INCREF(set);
        r->set = set;
        r->index = i;
        PyList_SET_ITEM(list, i, (PyObject *)r);
    }
    Py_DECREF(set);
    return list;
}

/* -- messages: the consumer's per-record objects, built here in bulk ------------------------------------------
 * MessageBase holds what streamplane.client.consumer.message.Message needs per record (its Record, the lease ledger
 * that ends it, the memory account of its batch, its outcome and attempt). Message subclasses it in Python
 * for its methods; `messages()` builds a whole decode result's worth without running Python per record.
 * Not tracked by the cycle collector, on purpose: a worker holds tens of thousands of messages in flight and
 * makes a million a second, and tracking them made the collector the consumer's largest cost (measured: half
 * the throughput). The one cycle through a message (ledger -> pending -> message -> ledger) is broken by the
 * ledger when its records end or its lease goes. */

typedef struct {
    PyObject_HEAD
    PyObject *record, *ledger, *held, *outcome;
    int attempt;
} MessageBase;

static void MessageBase_dealloc(MessageBase *m) {
    Py_CLEAR(m->record);
    Py_CLEAR(m->ledger);
    Py_CLEAR(m->held);
    Py_CLEAR(m->outcome);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyMemberDef MessageBase_members[] = {
    {"_record", T_OBJECT, offsetof(MessageBase, record), 0, "the decoder's record"},
    {"_ledger", T_OBJECT, offsetof(MessageBase, ledger), 0, "the lease ledger that records its outcome"},
    {"_held", T_OBJECT, offsetof(MessageBase, held), 0, "the memory account of its batch"},
    {"_outcome", T_OBJECT, offsetof(MessageBase, outcome), 0, "pending, acked, retried or rejected"},
    {"attempt", T_INT, offsetof(MessageBase, attempt), 0, "1 on first delivery; n on its n-th attempt"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject MessageBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "streamplane.native.MessageBase",
    .tp_basicsize = sizeof(MessageBase),
    .tp_dealloc = (destructor)MessageBase_dealloc,
    .tp_members = MessageBase_members,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_doc = "Storage of a consumer's message (subclassed by streamplane.client.consumer.message.Message).",
};

static PyObject *messages(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *columns, *ledger, *held, *outcome;
    PyTypeObject *cls;
    int attempt;
    if (!PyArg_ParseTuple(args, "OO!OOiO", &columns, &PyType_Type, &cls, &ledger, &held, &attempt, &outcome))
        return NULL;
    if (!PyType_IsSubtype(cls, &MessageBaseType)) {
        PyErr_SetString(PyExc_TypeError, "messages() builds subclasses of MessageBase only");
        return NULL;
    }
    RecordSet *set = recordset_new(columns);
    if (!set) return NULL;
    PyObject *list = PyList_New(set->count);
    for (Py_ssize_t i = 0; list && i < set->count; i++) {
        Record *r = PyObject_New(Record, &RecordType);
        MessageBase *m = r ? (MessageBase *)cls->tp_alloc(cls, 0) : NULL;
        if (!m) {
            Py_XDECREF(r);
            Py_CLEAR(list);
            break;
        }
        Py_INCREF(set);
        r->set = set;
        r->index = i;
        m->record = (PyObject *)r;
        Py_INCREF(ledger);
        m->ledger = ledger;
        Py_INCREF(held);
        m->held = held;
        Py_INCREF(outcome);
        m->outcome = outcome;
        m->attempt = attempt;
        if (PyObject_IS_GC((PyObject *)m)) PyObject_GC_UnTrack(m); /* Python subclasses are GC types */
        PyList_SET_ITEM(list, i, (PyObject *)m);
    }
    Py_DECREF(set);
    return list;
}

static PyObject *offset_of(PyObject *record) {
    if (Py_IS_TYPE(record, &RecordType)) return Record_offset((Record *)record, NULL);
    return PyObject_GetAttrString(record, "offset");
}

static int append_hold(PyObject *holds, PyObject *held, Py_ssize_t n) {
    PyObject *pair = Py_BuildValue("(On)", held, n);
    int rc = pair ? PyList_Append(holds, pair) : -1;
    Py_XDECREF(pair);
    return rc;
}

/* end_pending(msgs, pending, done, open) -> (offsets, [(held, n), ...]): every message of `msgs` still `open`
 * gets outcome `done`; those found in `pending` (offset -> message) leave it, and their offsets and memory
 * accounts are returned (runs of one account counted once). The caller holds the ledger's lock. */
static PyObject *end_pending(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *msgs, *pending, *done, *open;
    if (!PyArg_ParseTuple(args, "O!O!OO", &PyList_Type, &msgs, &PyDict_Type, &pending, &done, &open)) return NULL;
    PyObject *ended = PyList_New(0), *holds = PyList_New(0), *last = NULL;
    Py_ssize_t run = 0;
    if (!ended || !holds) goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(msgs); i++) {
        PyObject *item = PyList_GET_ITEM(msgs, i);
        if (!PyObject_TypeCheck(item, &MessageBaseType)) {
            PyErr_SetString(PyExc_TypeError, "end_pending() takes a list of messages");
            goto fail;
        }
        MessageBase *m = (MessageBase *)item;
        if (m->outcome != open) continue;
        Py_INCREF(done);
        Py_XSETREF(m->outcome, done);
        PyObject *offset = offset_of(m->record);
        if (!offset) goto fail;
        PyObject *found = PyDict_GetItemWithError(pending, offset);
        if (!found) {
            Py_DECREF(offset);
            if (PyErr_Occurred()) goto fail;
            continue; /* dropped with its lease, and released then */
        }
        if (PyDict_DelItem(pending, offset) < 0 || PyList_Append(ended, offset) < 0) {
            Py_DECREF(offset);
            goto fail;
        }
        Py_DECREF(offset);
        PyObject *held = m->held ? m->held : Py_None;
        if (held != last) {
            if (run && append_hold(holds, last, run) < 0) goto fail;
            last = held;
            run = 0;
        }
        run++;
    }
    if (run && append_hold(holds, last, run) < 0) goto fail;
    return Py_BuildValue("(NN)", ended, holds);
fail:
    Py_XDECREF(ended);
    Py_XDECREF(holds);
    return NULL;
}

static PyObject *crc32c(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"data", "software", NULL};
    Py_buffer in;
    int software = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|p", kwlist, &in, &software)) return NULL;
    uint32_t c;
    Py_BEGIN_ALLOW_THREADS
    c = software ? sp_crc32c_sw(0, in.buf, (size_t)in.len) : sp_crc32c(0, in.buf, (size_t)in.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&in);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *records_end(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer in;
    if (PyObject_GetBuffer(arg, &in, PyBUF_SIMPLE) < 0) return NULL;
    int64_t end = sp_records_end(in.buf, (size_t)in.len);
    PyBuffer_Release(&in);
    return PyLong_FromLongLong(end);
}

static PyObject *crc32c_hw_available(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyBool_FromLong(sp_crc32c_hw_available());
}

static PyMethodDef methods[] = {
    {"decode_columns", (PyCFunction)(void (*)(void))decode_columns, METH_VARARGS | METH_KEYWORDS,
     "decode_columns(data, max_decompressed, verify_crc=True, aborted=None, min_offset=MIN, where=None, "
     "partition=-1, mine=None) -> dict of columns"},
    {"compile_where", (PyCFunction)compile_where, METH_VARARGS,
     "compile_where(program: bytes) -> a compiled record predicate for decode_columns(where=); ValueError if bad"},
    {"crc32c", (PyCFunction)(void (*)(void))crc32c, METH_VARARGS | METH_KEYWORDS,
     "crc32c(data, software=False) -> int (CRC32C; software=True forces the table path)"},
    {"crc32c_hw_available", crc32c_hw_available, METH_NOARGS, "True when SSE4.2's crc32 instruction is used"},
    {"records_end", records_end, METH_O,
     "records_end(data) -> the offset after the last whole batch (from batch headers alone), -1 if none"},
    {"records", records, METH_O, "records(columns) -> list of Record, from a decode_columns result"},
    {"end_pending", end_pending, METH_VARARGS,
     "end_pending(msgs, pending, done, open) -> (offsets, [(held, n)]): end the open messages of a list at once"},
    {"messages", messages, METH_VARARGS,
     "messages(columns, cls, ledger, held, attempt, outcome) -> list of cls (a MessageBase subclass), one a record"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "streamplane._native",
                                    "Kafka RecordBatch v2 decoder with bounded decompression (C).", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&BufferType) < 0 || PyType_Ready(&RecordSetType) < 0 || PyType_Ready(&RecordType) < 0 ||
        PyType_Ready(&MessageBaseType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&MessageBaseType);
    if (PyModule_AddObject(m, "MessageBase", (PyObject *)&MessageBaseType) < 0) {
        Py_DECREF(&MessageBaseType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&RecordType);
    if (PyModule_AddObject(m, "Record", (PyObject *)&RecordType) < 0) {
        Py_DECREF(&RecordType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&BufferType);
    if (PyModule_AddObject(m, "Buffer", (PyObject *)&BufferType) < 0) {
        Py_DECREF(&BufferType);
        Py_DECREF(m);
        return NULL;
    }
    if (sp_lanes_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
