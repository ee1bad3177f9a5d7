/* The producer's fast path (lanes.c): the types Lane and Lanes, added to the module by sp_lanes_init. */
#ifndef SP_LANES_H
#define SP_LANES_H

#include <Python.h>

int sp_lanes_init(PyObject *module);

#endif
