/* formats._native: hot loops over record batches (placeholder until the native module lands). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static struct PyModuleDef native_module = {PyModuleDef_HEAD_INIT, "formats._native", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&native_module); }
