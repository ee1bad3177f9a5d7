/* The producer's fast path: `Producer.produce` for a record without a delivery callback, its headers none or a
 * list, on a lane whose route is known, is a table lookup and one call into librdkafka's Python binding, with
 * no Python frame of ours in between. Everything else (a lane not routed yet, headers as a dict, on_delivery, a
 * full librdkafka queue, a closed producer) goes to the general path, a Python callable given at construction.
 *
 * The Python version (streamplane.client.lanes) holds the producer's lock around the lookup and the call, so
 * that a route switch (which drops the lane from the table under that lock) and the heartbeat's snapshot of
 * what is in flight never fall between them. Here the GIL gives the same: nothing in the lookup and the
 * produce call of confluent-kafka (which does not release it) lets another Python thread run. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <structmember.h>

#include "lanes.h"

/* -- Lane: one lane's librdkafka produce, topic and route, and the records the fast path gave it ---------- */

typedef struct {
    PyObject_HEAD
    PyObject *produce;
    PyObject *poll;
    PyObject *topic;
    PyObject *route;
    Py_ssize_t produced;
} Lane;

/* Every this many records the fast path serves the producer's delivery reports itself (poll(0)): see
 * POLL_EVERY in streamplane.client.lanes, which has the same number. */
#define POLL_EVERY 1024

static int Lane_init(Lane *self, PyObject *args, PyObject *kwds) {
    static char *kws[] = {"produce", "poll", "topic", "route", NULL};
    PyObject *produce, *poll, *topic, *route;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOUO", kws, &produce, &poll, &topic, &route)) return -1;
    if (!PyCallable_Check(produce) || !PyCallable_Check(poll)) {
        PyErr_SetString(PyExc_TypeError, "produce and poll must be callable");
        return -1;
    }
    Py_INCREF(produce);
    Py_INCREF(poll);
    Py_INCREF(topic);
    Py_INCREF(route);
    Py_XSETREF(self->produce, produce);
    Py_XSETREF(self->poll, poll);
    Py_XSETREF(self->topic, topic);
    Py_XSETREF(self->route, route);
    return 0;
}

static int Lane_traverse(Lane *self, visitproc visit, void *arg) {
    Py_VISIT(self->produce);
    Py_VISIT(self->poll);
    Py_VISIT(self->route);
    return 0;
}

static int Lane_clear(Lane *self) {
    Py_CLEAR(self->produce);
    Py_CLEAR(self->poll);
    Py_CLEAR(self->topic);
    Py_CLEAR(self->route);
    return 0;
}

static void Lane_dealloc(Lane *self) {
    PyObject_GC_UnTrack(self);
    Lane_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef Lane_members[] = {
    {"produce", T_OBJECT, offsetof(Lane, produce), READONLY, "librdkafka's produce(topic, value, key)"},
    {"poll", T_OBJECT, offsetof(Lane, poll), READONLY, "librdkafka's poll(timeout)"},
    {"topic", T_OBJECT, offsetof(Lane, topic), READONLY, "the topic of the lane's active generation"},
    {"route", T_OBJECT, offsetof(Lane, route), READONLY, "what produce() returns for a record sent here"},
    {"produced", T_PYSSIZET, offsetof(Lane, produced), READONLY, "records the fast path sent here"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "streamplane._native.Lane",
    .tp_basicsize = sizeof(Lane),
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Lane_init,
    .tp_dealloc = (destructor)Lane_dealloc,
    .tp_traverse = (traverseproc)Lane_traverse,
    .tp_clear = (inquiry)Lane_clear,
    .tp_members = Lane_members,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Lane(produce, poll, topic, route): where the fast path sends one lane's records.",
};

/* -- Lanes: {stream: {lane: Lane}}, called as produce(stream, value, key=None, lane=..., headers=None,
 * on_delivery=None) ------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *streams;
    PyObject *general;
} Lanes;

static PyObject *zero, *str_realtime, *kw_key, *kw_lane, *kw_headers, *kw_on_delivery, *just_headers;

/* The general path, called with what the caller gave. */
static PyObject *general(Lanes *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return PyObject_Vectorcall(self->general, args, nargsf, kwnames);
}

static int kw_is(PyObject *name, PyObject *interned) {
    return name == interned || PyUnicode_Compare(name, interned) == 0;
}

static PyObject *Lanes_vectorcall(Lanes *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs < 2 || nargs > 6) return general(self, args, nargsf, kwnames);
    PyObject *stream = args[0], *value = args[1];
    PyObject *key = nargs > 2 ? args[2] : Py_None;
    PyObject *lane = nargs > 3 ? args[3] : str_realtime;
    PyObject *headers = nargs > 4 ? args[4] : Py_None;
    PyObject *on_delivery = nargs > 5 ? args[5] : Py_None;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i), *v = args[nargs + i];
        if (kw_is(name, kw_key) && nargs <= 2) key = v;
        else if (kw_is(name, kw_lane) && nargs <= 3) lane = v;
        else if (kw_is(name, kw_headers) && nargs <= 4) headers = v;
        else if (kw_is(name, kw_on_delivery) && nargs <= 5) on_delivery = v;
        else return general(self, args, nargsf, kwnames); /* its TypeError names the argument */
    }
    /* headers as a list of (name, value) go along with the record; a dict, or anything else, takes the
     * general path (which turns a dict into a list, and lets librdkafka's binding refuse the rest) */
    int listed = PyList_CheckExact(headers);
    if ((headers != Py_None && !listed) || on_delivery != Py_None || !PyUnicode_CheckExact(stream) ||
        !PyUnicode_CheckExact(lane))
        return general(self, args, nargsf, kwnames);
    int with_headers = listed && PyList_GET_SIZE(headers) > 0;
    PyObject *lanes = PyDict_GetItemWithError(self->streams, stream);
    if (!lanes) return PyErr_Occurred() ? NULL : general(self, args, nargsf, kwnames);
    Lane *to = (Lane *)PyDict_GetItemWithError(lanes, lane);
    if (!to) return PyErr_Occurred() ? NULL : general(self, args, nargsf, kwnames);
    PyObject *call[4] = {to->topic, value, key, headers};
    Py_INCREF(to); /* the call could, in principle, drop it from the table */
    PyObject *done = PyObject_Vectorcall(to->produce, call, 3, with_headers ? just_headers : NULL);
    if (!done) {
        Py_DECREF(to);
        if (!PyErr_ExceptionMatches(PyExc_BufferError)) return NULL;
        PyErr_Clear(); /* librdkafka's queue is full: the general path waits for room */
        return general(self, args, nargsf, kwnames);
    }
    Py_DECREF(done);
    if (++to->produced % POLL_EVERY == 0) {
        PyObject *served = PyObject_CallOneArg(to->poll, zero);
        if (!served) {
            Py_DECREF(to);
            return NULL; /* a delivery callback raised: the record itself was handed over */
        }
        Py_DECREF(served);
    }
    PyObject *route = to->route;
    Py_INCREF(route);
    Py_DECREF(to);
    return route;
}

static int Lanes_init(Lanes *self, PyObject *args, PyObject *kwds) {
    static char *kws[] = {"general", "lock", NULL};
    PyObject *fallback, *lock;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO", kws, &fallback, &lock)) return -1;
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "general must be callable");
        return -1;
    }
    PyObject *streams = PyDict_New();
    if (!streams) return -1;
    (void)lock; /* the Python version's signature: not taken here (see the top) */
    Py_INCREF(fallback);
    Py_XSETREF(self->streams, streams);
    Py_XSETREF(self->general, fallback);
    self->vectorcall = (vectorcallfunc)Lanes_vectorcall;
    return 0;
}

static PyObject *Lanes_call(Lanes *self, PyObject *args, PyObject *kwargs) {
    return PyVectorcall_Call((PyObject *)self, args, kwargs);
}

/* False, with a TypeError set, for a Lanes made without __init__ (Lanes.__new__(Lanes)). */
static int ready(Lanes *self) {
    if (self->streams) return 1;
    PyErr_SetString(PyExc_TypeError, "the Lanes was not initialized");
    return 0;
}

static PyObject *Lanes_set(Lanes *self, PyObject *args) {
    PyObject *stream, *lane, *to;
    if (!ready(self)) return NULL;
    if (!PyArg_ParseTuple(args, "UUO!", &stream, &lane, &LaneType, &to)) return NULL;
    if (!((Lane *)to)->produce) {
        PyErr_SetString(PyExc_TypeError, "the Lane was not initialized");
        return NULL;
    }
    PyObject *lanes = PyDict_GetItemWithError(self->streams, stream);
    if (!lanes) {
        if (PyErr_Occurred()) return NULL;
        lanes = PyDict_New();
        if (!lanes) return NULL;
        int rc = PyDict_SetItem(self->streams, stream, lanes);
        Py_DECREF(lanes); /* the table holds it */
        if (rc < 0) return NULL;
    }
    if (PyDict_SetItem(lanes, lane, to) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Lanes_drop(Lanes *self, PyObject *args) {
    PyObject *stream, *lane;
    if (!ready(self)) return NULL;
    if (!PyArg_ParseTuple(args, "UU", &stream, &lane)) return NULL;
    PyObject *lanes = PyDict_GetItemWithError(self->streams, stream);
    if (!lanes) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    if (PyDict_DelItem(lanes, lane) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError)) return NULL;
        PyErr_Clear();
    }
    Py_RETURN_NONE;
}

static PyObject *Lanes_clear_table(Lanes *self, PyObject *unused) {
    (void)unused;
    if (!ready(self)) return NULL;
    PyDict_Clear(self->streams);
    Py_RETURN_NONE;
}

static int Lanes_traverse(Lanes *self, visitproc visit, void *arg) {
    Py_VISIT(self->streams);
    Py_VISIT(self->general);
    return 0;
}

static int Lanes_clear(Lanes *self) {
    Py_CLEAR(self->streams);
    Py_CLEAR(self->general);
    return 0;
}

static void Lanes_dealloc(Lanes *self) {
    PyObject_GC_UnTrack(self);
    Lanes_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Lanes_methods[] = {
    {"set", (PyCFunction)Lanes_set, METH_VARARGS, "set(stream, lane, Lane): send the lane's records there"},
    {"drop", (PyCFunction)Lanes_drop, METH_VARARGS, "drop(stream, lane): the lane's records take the general path"},
    {"clear", (PyCFunction)Lanes_clear_table, METH_NOARGS, "clear(): every record takes the general path"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LanesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "streamplane._native.Lanes",
    .tp_basicsize = sizeof(Lanes),
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Lanes_init,
    .tp_dealloc = (destructor)Lanes_dealloc,
    .tp_traverse = (traverseproc)Lanes_traverse,
    .tp_clear = (inquiry)Lanes_clear,
    .tp_call = (ternaryfunc)Lanes_call,
    .tp_vectorcall_offset = offsetof(Lanes, vectorcall),
    .tp_methods = Lanes_methods,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Lanes(general, lock): produce(stream, value, key=None, lane='realtime', headers=None, "
              "on_delivery=None) through the lane's Lane, else general(...) with the same arguments.",
};

int sp_lanes_init(PyObject *module) {
    zero = PyLong_FromLong(0);
    str_realtime = PyUnicode_InternFromString("realtime");
    kw_key = PyUnicode_InternFromString("key");
    kw_lane = PyUnicode_InternFromString("lane");
    kw_headers = PyUnicode_InternFromString("headers");
    just_headers = kw_headers ? PyTuple_Pack(1, kw_headers) : NULL;
    kw_on_delivery = PyUnicode_InternFromString("on_delivery");
    if (!zero || !str_realtime || !kw_key || !kw_lane || !kw_headers || !kw_on_delivery || !just_headers) return -1;
    if (PyType_Ready(&LaneType) < 0 || PyType_Ready(&LanesType) < 0) return -1;
    Py_INCREF(&LaneType);
    if (PyModule_AddObject(module, "Lane", (PyObject *)&LaneType) < 0) {
        Py_DECREF(&LaneType);
        return -1;
    }
    Py_INCREF(&LanesType);
    if (PyModule_AddObject(module, "Lanes", (PyObject *)&LanesType) < 0) {
        Py_DECREF(&LanesType);
        return -1;
    }
    return 0;
}
