/* What binding.c uses of CPython's API beyond the stable ABI, for a build against it
 * (Py_LIMITED_API, the abi3 wheel: scripts/wheel.sh): each name mapped to its stable-ABI
 * counterpart. A build for one interpreter (pip install .) keeps CPython's own, faster forms. */
#ifndef ZGATE_PY_LIMITED_H
#define ZGATE_PY_LIMITED_H

#include <stdlib.h>

#ifndef Py_LIMITED_API
/* The name CPython prints for x's type ("numpy.ndarray", "list"). */
static const char *type_name(PyObject *x) { return Py_TYPE(x)->tp_name; }

#else
#if Py_LIMITED_API + 0 < 0x030B0000
#error "binding.c reads NumPy arrays through the buffer protocol, in the stable ABI from 3.11"
#endif

#define PyTuple_GET_ITEM PyTuple_GetItem
#define PyTuple_GET_SIZE PyTuple_Size
#define PyTuple_SET_ITEM PyTuple_SetItem
#define PyList_GET_ITEM PyList_GetItem
#define PyList_GET_SIZE PyList_Size
#define PyUnicode_AsUTF8(s) PyUnicode_AsUTF8AndSize((s), NULL)
#define PyObject_CallOneArg(f, a) PyObject_CallFunctionObjArgs((f), (a), NULL)
#define PyObject_CallMethodNoArgs(o, name) PyObject_CallMethodObjArgs((o), (name), NULL)
#define Py_XSETREF(dst, src)       \
  do {                             \
    PyObject *zg_old = (PyObject *)(dst); \
    (dst) = (src);                 \
    Py_XDECREF(zg_old);            \
  } while (0)

/* tp_name rebuilt from the type's attributes, as CPython forms it: a heap type's __name__,
 * a static type's __module__.__name__ (builtins bare). Error messages only: one buffer. */
static const char *type_name(PyObject *x) {
  static char out[256];
  PyObject *t = (PyObject *)Py_TYPE(x), *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb); /* called while building an error: keep the one pending */
  PyObject *name = PyObject_GetAttrString(t, "__name__");
  PyObject *mod = (PyType_GetFlags(Py_TYPE(x)) & Py_TPFLAGS_HEAPTYPE) ? NULL
                  : PyObject_GetAttrString(t, "__module__");
  const char *n = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
  const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8AndSize(mod, NULL) : NULL;
  if (m && strcmp(m, "builtins")) snprintf(out, sizeof out, "%s.%s", m, n ? n : "?");
  else snprintf(out, sizeof out, "%s", n ? n : "?");
  Py_XDECREF(name);
  Py_XDECREF(mod);
  PyErr_Clear();
  PyErr_Restore(et, ev, tb);
  return out;
}

#if Py_LIMITED_API + 0 < 0x030C0000
/* Vectorcall (in the stable ABI from 3.12, whose Python.h declares these three) through
 * PyObject_Call: positional args, keywords named by kwnames and given after them. */
#define PY_VECTORCALL_ARGUMENTS_OFFSET ((size_t)1 << (8 * sizeof(size_t) - 1))
static PyObject *PyObject_Vectorcall(PyObject *f, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames) {
  Py_ssize_t n = (Py_ssize_t)(nargsf & ~PY_VECTORCALL_ARGUMENTS_OFFSET);
  Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
  PyObject *pos = PyTuple_New(n), *kw = nkw ? PyDict_New() : NULL, *r = NULL;
  if (!pos || (nkw && !kw)) goto out;
  for (Py_ssize_t i = 0; i < n; i++) {
    Py_INCREF(args[i]);
    PyTuple_SetItem(pos, i, args[i]);
  }
  for (Py_ssize_t i = 0; i < nkw; i++)
    if (PyDict_SetItem(kw, PyTuple_GetItem(kwnames, i), args[n + i])) goto out;
  r = PyObject_Call(f, pos, kw);
out:
  Py_XDECREF(pos);
  Py_XDECREF(kw);
  return r;
}

/* args[0].name(args[1:]...) */
static PyObject *PyObject_VectorcallMethod(PyObject *name, PyObject *const *args, size_t nargsf,
                                           PyObject *kwnames) {
  PyObject *m = PyObject_GetAttr(args[0], name);
  if (!m) return NULL;
  PyObject *r = PyObject_Vectorcall(m, args + 1, (nargsf & ~PY_VECTORCALL_ARGUMENTS_OFFSET) - 1,
                                    kwnames);
  Py_DECREF(m);
  return r;
}
#endif /* 3.11's stable ABI */
#endif
#endif
