/* Python glue for the decoder core: `decode_columns` returns the columns as zero-copy buffers, and the
 * Python package (streamplane.native) turns them into batches, Arrow arrays and errors. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "spdecode.h"

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

static PyObject *batch_tuple(const sp_batch_info *b) {
    return Py_BuildValue("(LLiLLLiiiiiiiiiLLL)", (long long)b->base_offset, (long long)b->last_offset,
                         (int)b->partition_leader_epoch, (long long)b->first_timestamp, (long long)b->max_timestamp,
                         (long long)b->producer_id, (int)b->producer_epoch, (int)b->base_sequence,
                         (int)b->record_count, (int)b->attributes, (int)b->codec, (int)b->transactional,
                         (int)b->control, (int)b->aborted, (int)b->log_append_time, (long long)b->position,
                         (long long)b->compressed_size, (long long)b->decompressed_size);
}

static int set_item(PyObject *d, const char *key, PyObject *value) {
    if (!value) return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

static PyObject *decode_columns(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"data", "max_decompressed", "verify_crc", "aborted", NULL};
    Py_buffer in;
    Py_ssize_t max_decompressed;
    int verify_crc = 1;
    PyObject *aborted_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*n|pO", kwlist, &in, &max_decompressed, &verify_crc,
                                     &aborted_obj))
        return NULL;
    sp_aborted_txn *aborted = NULL;
    Py_ssize_t naborted = 0;
    PyObject *result = NULL;
    if (max_decompressed <= 0) {
        PyErr_SetString(PyExc_ValueError, "max_decompressed must be a positive number of bytes");
        goto out;
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
    Py_BEGIN_ALLOW_THREADS
    sp_decode(in.buf, (size_t)in.len, (size_t)max_decompressed, verify_crc, aborted_obj == Py_None ? NULL : aborted,
              (size_t)naborted, &r);
    Py_END_ALLOW_THREADS

    result = PyDict_New();
    PyObject *batches = PyList_New((Py_ssize_t)r.nbatches);
    if (!result || !batches) { Py_XDECREF(batches); Py_CLEAR(result); sp_result_free(&r); goto out; }
    for (size_t i = 0; i < r.nbatches; i++) {
        PyObject *t = batch_tuple(&r.batches[i]);
        if (!t) { Py_DECREF(batches); Py_CLEAR(result); sp_result_free(&r); goto out; }
        PyList_SET_ITEM(batches, (Py_ssize_t)i, t);
    }
    PyObject *error = Py_None;
    Py_INCREF(Py_None);
    if (r.stop == SP_STOP_ERROR) {
        Py_DECREF(Py_None);
        error = Py_BuildValue("(isLLLLL)", r.err_kind, r.err_msg, (long long)r.err_position,
                              (long long)r.err_base_offset, (long long)r.err_last_offset, (long long)r.err_size,
                              (long long)r.err_limit);
    }
    if (set_item(result, "count", PyLong_FromSize_t(r.count)) || set_item(result, "offsets", take(&r.offsets)) ||
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

static PyObject *crc32c_hw_available(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyBool_FromLong(sp_crc32c_hw_available());
}

static PyMethodDef methods[] = {
    {"decode_columns", (PyCFunction)(void (*)(void))decode_columns, METH_VARARGS | METH_KEYWORDS,
     "decode_columns(data, max_decompressed, verify_crc=True, aborted=None) -> dict of columns"},
    {"crc32c", (PyCFunction)(void (*)(void))crc32c, METH_VARARGS | METH_KEYWORDS,
     "crc32c(data, software=False) -> int (CRC32C; software=True forces the table path)"},
    {"crc32c_hw_available", crc32c_hw_available, METH_NOARGS, "True when SSE4.2's crc32 instruction is used"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "streamplane._native",
                                    "Kafka RecordBatch v2 decoder with bounded decompression (C).", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&BufferType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&BufferType);
    if (PyModule_AddObject(m, "Buffer", (PyObject *)&BufferType) < 0) {
        Py_DECREF(&BufferType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
