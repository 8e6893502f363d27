/* zgate._hot: the hot path of zgate's calls on plain PyTorch tensors, compiled.
 *
 * A call reads each tensor's metadata through its Python attributes (dtype, is_cuda /
 * is_cpu, get_device(), shape, stride(), data_ptr(): no libtorch, so one build serves every
 * PyTorch), allocates new outputs with torch.empty_like, fills DLTensor headers on the C
 * stack and calls libzgate through the entry points that zgate._lib loaded (their addresses
 * are handed over by bind(): one loader, the library ZGATE_LIBRARY names included).
 *
 * Each entry answers None for a call it does not take (another type, dtype, rank or device,
 * a num_threads that is not a plain int within a C int, an attribute that raises): the
 * caller then takes the general path of zgate._call, which names any problem. Callers do not
 * call it under torch.compile's tracing, which cannot trace a compiled function.
 * A call it takes and the library refuses raises what bind()'s `fail` builds, the same
 * zgate.Error as the general path's. The GIL is released around the library call.
 *
 *   bind(bwd_addr, fwd_addr, tensor_type, (float32, float16, bfloat16), empty_like,
 *        contiguous_format, raw_stream, fail, increment_version)
 *   bwd(dout, z, o, dz, dout_scaled, inplace, num_threads) -> (dz, dout_scaled) | None
 *        new outputs, or both given (then increment_version(t) for each after the call:
 *        raw-pointer writes bypass PyTorch's version counters; None: not bumped); declines
 *        inplace and one output given alone
 *   bwd_into(dout, z, o, dz, dout_scaled, num_threads) -> (dz, dout_scaled) | None
 *        into given outputs, no versions bumped: for outputs just allocated
 *   fwd(o, z, out, num_threads) -> out | None        a new output, or a given one (bumped)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "zgate.h"

typedef int (*zg_bwd_fn)(const DLTensor *, const DLTensor *, const DLTensor *, DLTensor *,
                         DLTensor *, const zgate_options *);
typedef int (*zg_fwd_fn)(const DLTensor *, const DLTensor *, DLTensor *, const zgate_options *);

/* What bind() hands over; all NULL until then (every call is declined). One interpreter. */
static struct {
  zg_bwd_fn bwd;
  zg_fwd_fn fwd;
  PyObject *tensor; /* torch.Tensor: exact type only (subclasses have their own dispatch) */
  PyObject *dtypes[3];
  PyObject *empty_like, *contiguous, *raw_stream, *fail, *increment_version;
  PyObject *kw_memory_format; /* ("memory_format",): vectorcall's keyword names */
} H;

static const DLDataType kDtypes[3] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}};

/* The tensor attributes read, as torch.Tensor defines them (found once, by bind()): the
 * properties' descriptors are called directly and the methods with the tensor as their first
 * argument, which skips the per-call lookup and the bound method that attribute access on
 * the tensor would make (binding the same objects: the calls take torch.Tensor only). */
enum { A_DTYPE, A_IS_CUDA, A_IS_CPU, A_SHAPE, A_GET_DEVICE, A_STRIDE, A_DATA_PTR, N_ATTR };
static const char *const kAttrNames[N_ATTR] = {"dtype", "is_cuda", "is_cpu", "shape",
                                               "get_device", "stride", "data_ptr"};
enum { N_PROPERTIES = A_SHAPE + 1 };
static PyObject *attr_of[N_ATTR];
static descrgetfunc getter_of[N_PROPERTIES];

static PyObject *property(int a, PyObject *x) {
  return getter_of[a](attr_of[a], x, (PyObject *)Py_TYPE(x));
}

static PyObject *method(int a, PyObject *x) { return PyObject_Vectorcall(attr_of[a], &x, 1, NULL); }

enum { TAKEN = 1, DECLINED = 0, FAILED = -1 };

/* One tensor's DLTensor header and the arrays it points to. */
typedef struct {
  DLTensor t;
  int64_t shape[4], strides[4];
} Desc;

/* An exception from a tensor's attribute is the general path's to name (a sparse tensor's
 * stride(), say): declined. Anything that is not an Exception (KeyboardInterrupt) passes. */
static int declined_on_error(void) {
  if (!PyErr_ExceptionMatches(PyExc_Exception)) return FAILED;
  PyErr_Clear();
  return DECLINED;
}

static int read_i64(PyObject *v, int64_t *out) {
  long long x = PyLong_AsLongLong(v);
  if (x == -1 && PyErr_Occurred()) return -1;
  *out = (int64_t)x;
  return 0;
}

/* The 4 ints of a tuple (torch.Size is one) into out; DECLINED for another rank. */
static int read4(PyObject *tup, int64_t out[4]) {
  if (!PyTuple_Check(tup) || PyTuple_GET_SIZE(tup) != 4) return DECLINED;
  for (int i = 0; i < 4; i++)
    if (read_i64(PyTuple_GET_ITEM(tup, i), &out[i])) return declined_on_error();
  return TAKEN;
}

static int read_ptr(PyObject *x, void **out) {
  PyObject *p = method(A_DATA_PTR, x);
  if (!p) return declined_on_error();
  unsigned long long v = PyLong_AsUnsignedLongLong(p);
  Py_DECREF(p);
  if (v == (unsigned long long)-1 && PyErr_Occurred()) return declined_on_error();
  *out = (void *)(uintptr_t)v;
  return TAKEN;
}

/* dtype and device of x into d->t: DECLINED for a dtype outside the three or a device other
 * than CPU and CUDA. */
static int read_kind(PyObject *x, Desc *d) {
  PyObject *dt = property(A_DTYPE, x);
  if (!dt) return declined_on_error();
  int k = 0;
  while (k < 3 && dt != H.dtypes[k]) k++;
  Py_DECREF(dt);
  if (k == 3) return DECLINED;
  d->t.dtype = kDtypes[k];
  PyObject *c = property(A_IS_CUDA, x);
  if (!c) return declined_on_error();
  int cuda = c == Py_True;
  Py_DECREF(c);
  if (cuda) {
    PyObject *i = method(A_GET_DEVICE, x);
    if (!i) return declined_on_error();
    long id = PyLong_AsLong(i);
    Py_DECREF(i);
    if (id == -1 && PyErr_Occurred()) return declined_on_error();
    d->t.device.device_type = kDLCUDA;
    d->t.device.device_id = (int32_t)id;
    return TAKEN;
  }
  c = property(A_IS_CPU, x);
  if (!c) return declined_on_error();
  int cpu = c == Py_True;
  Py_DECREF(c);
  if (!cpu) return DECLINED;
  d->t.device.device_type = kDLCPU;
  d->t.device.device_id = 0;
  return TAKEN;
}

/* The whole header of x: kind, shape, strides, data. */
static int describe(PyObject *x, Desc *d) {
  memset(&d->t, 0, sizeof d->t);
  int r = read_kind(x, d);
  if (r != TAKEN) return r;
  PyObject *s = property(A_SHAPE, x);
  if (!s) return declined_on_error();
  r = read4(s, d->shape);
  Py_DECREF(s);
  if (r != TAKEN) return r;
  s = method(A_STRIDE, x);
  if (!s) return declined_on_error();
  r = read4(s, d->strides);
  Py_DECREF(s);
  if (r != TAKEN) return r;
  d->t.ndim = 4;
  d->t.shape = d->shape;
  d->t.strides = d->strides;
  return read_ptr(x, &d->t.data);
}

/* A new output like `like`'s description: compact (strides NULL), its shape, dtype, device. */
static int describe_fresh(PyObject *x, const Desc *like, Desc *d) {
  memset(&d->t, 0, sizeof d->t);
  d->t.device = like->t.device;
  d->t.dtype = like->t.dtype;
  d->t.ndim = 4;
  d->t.shape = (int64_t *)like->shape;
  return read_ptr(x, &d->t.data);
}

/* Declines a call before bind(), one on another type than torch.Tensor itself, and a
 * num_threads that is not a plain int within a C int. */
static int admissible(PyObject *const *ts, int n, PyObject *num_threads, int *threads) {
  if (!H.tensor) return DECLINED;
  for (int i = 0; i < n; i++)
    if ((PyObject *)Py_TYPE(ts[i]) != H.tensor) return DECLINED;
  if (!PyLong_CheckExact(num_threads)) return DECLINED;
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(num_threads, &overflow);
  if (overflow || v < INT32_MIN || v > INT32_MAX) return DECLINED;
  *threads = (int)v;
  return TAKEN;
}

/* The options of a call on tensors described by d: num_threads and, on CUDA, PyTorch's
 * current stream of the device. */
static int options_of(const Desc *d, int threads, zgate_options *o) {
  zgate_options init = ZGATE_OPTIONS_INIT;
  *o = init;
  o->num_threads = threads;
  if (d->t.device.device_type != kDLCUDA) return TAKEN;
  PyObject *i = PyLong_FromLong(d->t.device.device_id);
  if (!i) return FAILED;
  PyObject *s = PyObject_CallOneArg(H.raw_stream, i);
  Py_DECREF(i);
  if (!s) return declined_on_error();
  unsigned long long v = PyLong_AsUnsignedLongLong(s);
  Py_DECREF(s);
  if (v == (unsigned long long)-1 && PyErr_Occurred()) return declined_on_error();
  o->cuda_stream = (void *)(uintptr_t)v;
  return TAKEN;
}

/* Whether d's strides are the compact ones of its shape, as PyTorch computes them (a size-0
 * dimension counts as 1). */
static int compact(const Desc *d) {
  int64_t want = 1;
  for (int i = 3; i >= 0; i--) {
    if (d->strides[i] != want) return 0;
    want *= d->shape[i] > 1 ? d->shape[i] : 1;
  }
  return 1;
}

/* New outputs like x (described by d): compact, x's dtype and device; the second (b, unless
 * NULL) like the first. DECLINED where PyTorch refuses. A compact x is copied without the
 * memory_format keyword: empty_like keeps a dense tensor's strides, and a keyword costs. */
static int allocate(PyObject *x, const Desc *d, PyObject **a, PyObject **b) {
  PyObject *args[2] = {x, H.contiguous};
  *a = compact(d) ? PyObject_Vectorcall(H.empty_like, args, 1, NULL)
                  : PyObject_Vectorcall(H.empty_like, args, 1, H.kw_memory_format);
  if (!*a) return declined_on_error();
  if (!b) return TAKEN;
  PyObject *like[1] = {*a}; /* compact already: no memory_format to parse */
  *b = PyObject_Vectorcall(H.empty_like, like, 1, NULL);
  if (*b) return TAKEN;
  Py_CLEAR(*a);
  return declined_on_error();
}

/* The tensors of a call, as the error messages name them. */
enum { N_BWD, N_BWD_OUT, N_FWD, N_FWD_OUT, N_CALLS };
static const char *const kNames[N_CALLS][5] = {{"dout", "z", "o"},
                                               {"dout", "z", "o", "dz", "dout_scaled"},
                                               {"o", "z"},
                                               {"o", "z", "out"}};
static const int kCount[N_CALLS] = {3, 5, 2, 3};
static PyObject *names_of[N_CALLS]; /* tuples of kNames, made by the module's init */

/* The library refused the call: raise what fail(status, names, tensors...) builds. */
static PyObject *raise_failure(int status, int call, PyObject *const *ts) {
  const int n = kCount[call];
  PyObject *args[7];
  args[0] = PyLong_FromLong(status);
  if (!args[0]) return NULL;
  args[1] = names_of[call];
  for (int i = 0; i < n; i++) args[i + 2] = ts[i];
  PyObject *e = PyObject_Vectorcall(H.fail, args, (size_t)n + 2, NULL);
  Py_DECREF(args[0]);
  if (e) {
    PyErr_SetObject((PyObject *)Py_TYPE(e), e);
    Py_DECREF(e);
  }
  return NULL;
}

/* After a call into given outputs: their versions bumped (autograd sees the write). */
static int bump(PyObject *const *outs, int n) {
  if (H.increment_version == Py_None) return 0;
  for (int i = 0; i < n; i++) {
    PyObject *r = PyObject_CallOneArg(H.increment_version, outs[i]);
    if (!r) return -1;
    Py_DECREF(r);
  }
  return 0;
}

static PyObject *result(int r) {
  if (r == FAILED) return NULL;
  Py_RETURN_NONE;
}

/* bwd on dout, z, o into dz, dos (NULL: new ones); given ones' versions bumped if bumped. */
static PyObject *run_bwd(PyObject *const *in, PyObject *dz, PyObject *dos, PyObject *num_threads,
                         int bumped) {
  PyObject *ts[5] = {in[0], in[1], in[2], dz, dos};
  const int given = dz != NULL;
  int threads = 0;
  int r = admissible(ts, given ? 5 : 3, num_threads, &threads);
  if (r != TAKEN) return result(r);
  Desc d[5];
  for (int i = 0; i < 3 && r == TAKEN; i++) r = describe(in[i], &d[i]);
  zgate_options o;
  if (r == TAKEN) r = options_of(&d[0], threads, &o);
  if (r != TAKEN) return result(r);
  if (given) {
    for (int i = 3; i < 5 && r == TAKEN; i++) r = describe(ts[i], &d[i]);
    if (r != TAKEN) return result(r);
    Py_INCREF(dz);
    Py_INCREF(dos);
  } else {
    r = allocate(in[0], &d[0], &dz, &dos);
    if (r == TAKEN) r = describe_fresh(dz, &d[0], &d[3]);
    if (r == TAKEN) r = describe_fresh(dos, &d[0], &d[4]);
    if (r != TAKEN) {
      Py_XDECREF(dz);
      Py_XDECREF(dos);
      return result(r);
    }
  }
  int st;
  Py_BEGIN_ALLOW_THREADS
  st = H.bwd(&d[0].t, &d[1].t, &d[2].t, &d[3].t, &d[4].t, &o);
  Py_END_ALLOW_THREADS
  if (st != ZGATE_OK) {
    raise_failure(st, given ? N_BWD_OUT : N_BWD, ts);
    Py_DECREF(dz);
    Py_DECREF(dos);
    return NULL;
  }
  PyObject *pair = given && bumped && bump(ts + 3, 2) ? NULL : PyTuple_New(2);
  if (!pair) {
    Py_DECREF(dz);
    Py_DECREF(dos);
    return NULL;
  }
  PyTuple_SET_ITEM(pair, 0, dz);
  PyTuple_SET_ITEM(pair, 1, dos);
  return pair;
}

static int nargs_is(const char *name, Py_ssize_t got, Py_ssize_t want) {
  if (got == want) return 1;
  PyErr_Format(PyExc_TypeError, "zgate._hot.%s takes %zd arguments (%zd given)", name, want, got);
  return 0;
}

static PyObject *hot_bwd(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  if (!nargs_is("bwd", n, 7)) return NULL;
  if (a[5] != Py_False || (a[3] == Py_None) != (a[4] == Py_None)) Py_RETURN_NONE;
  if (a[3] == Py_None) return run_bwd(a, NULL, NULL, a[6], 0);
  return run_bwd(a, a[3], a[4], a[6], 1);
}

static PyObject *hot_bwd_into(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  if (!nargs_is("bwd_into", n, 6)) return NULL;
  return run_bwd(a, a[3], a[4], a[5], 0);
}

static PyObject *hot_fwd(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  if (!nargs_is("fwd", n, 4)) return NULL;
  PyObject *out = a[2] == Py_None ? NULL : a[2];
  const int given = out != NULL;
  PyObject *ts[3] = {a[0], a[1], out};
  int threads = 0;
  int r = admissible(ts, given ? 3 : 2, a[3], &threads);
  if (r != TAKEN) return result(r);
  Desc d[3];
  for (int i = 0; i < 2 + given && r == TAKEN; i++) r = describe(ts[i], &d[i]);
  zgate_options o;
  if (r == TAKEN) r = options_of(&d[0], threads, &o);
  if (r != TAKEN) return result(r);
  if (given) {
    Py_INCREF(out);
  } else {
    r = allocate(a[0], &d[0], &out, NULL);
    if (r == TAKEN) r = describe_fresh(out, &d[0], &d[2]);
    if (r != TAKEN) {
      Py_XDECREF(out);
      return result(r);
    }
  }
  int st;
  Py_BEGIN_ALLOW_THREADS
  st = H.fwd(&d[0].t, &d[1].t, &d[2].t, &o);
  Py_END_ALLOW_THREADS
  if (st != ZGATE_OK) {
    raise_failure(st, given ? N_FWD_OUT : N_FWD, ts);
    Py_DECREF(out);
    return NULL;
  }
  if (given && bump(&out, 1)) Py_CLEAR(out);
  return out;
}

/* *slot = v (a new reference), the old value released after. */
#define Py_XSETREF_COMPAT(slot, v) \
  do {                             \
    PyObject *old_ = (slot);       \
    (slot) = (v);                  \
    Py_XDECREF(old_);              \
  } while (0)

static void *address_of(PyObject *v) {
  unsigned long long a = PyLong_AsUnsignedLongLong(v);
  return a == (unsigned long long)-1 && PyErr_Occurred() ? NULL : (void *)(uintptr_t)a;
}

static PyObject *hot_bind(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  if (!nargs_is("bind", n, 9)) return NULL;
  void *b = address_of(a[0]), *f = address_of(a[1]);
  if (!b || !f) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "zgate._hot.bind: a NULL entry point");
    return NULL;
  }
  PyObject *found[N_ATTR];
  for (int i = 0; i < N_ATTR; i++) {
    found[i] = PyObject_GetAttrString(a[2], kAttrNames[i]);
    if (i < N_PROPERTIES && found[i] && !Py_TYPE(found[i])->tp_descr_get) {
      PyErr_Format(PyExc_TypeError, "zgate._hot.bind: %s of the tensor type is not a property",
                   kAttrNames[i]);
      Py_CLEAR(found[i]);
    }
    if (!found[i]) {
      while (i--) Py_DECREF(found[i]);
      return NULL;
    }
  }
  for (int i = 0; i < N_ATTR; i++) {
    Py_XSETREF_COMPAT(attr_of[i], found[i]);
    if (i < N_PROPERTIES) getter_of[i] = Py_TYPE(found[i])->tp_descr_get;
  }
  if (!PyTuple_Check(a[3]) || PyTuple_GET_SIZE(a[3]) != 3) {
    PyErr_SetString(PyExc_TypeError, "zgate._hot.bind: dtypes is a tuple of 3");
    return NULL;
  }
  PyObject **slots[] = {&H.tensor, &H.dtypes[0], &H.dtypes[1], &H.dtypes[2], &H.empty_like,
                        &H.contiguous, &H.raw_stream, &H.fail, &H.increment_version};
  PyObject *vals[] = {a[2], PyTuple_GET_ITEM(a[3], 0), PyTuple_GET_ITEM(a[3], 1),
                      PyTuple_GET_ITEM(a[3], 2), a[4], a[5], a[6], a[7], a[8]};
  for (size_t i = 0; i < sizeof slots / sizeof *slots; i++) {
    Py_INCREF(vals[i]);
    Py_XSETREF_COMPAT(*slots[i], vals[i]);
  }
  H.bwd = (zg_bwd_fn)b;
  H.fwd = (zg_fwd_fn)f;
  Py_RETURN_NONE;
}

static PyMethodDef hot_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))hot_bind, METH_FASTCALL, "Hands over the entry points and torch's objects."},
    {"bwd", (PyCFunction)(void (*)(void))hot_bwd, METH_FASTCALL, "zgate.bwd with new outputs, or None."},
    {"bwd_into", (PyCFunction)(void (*)(void))hot_bwd_into, METH_FASTCALL, "bwd into given outputs, or None."},
    {"fwd", (PyCFunction)(void (*)(void))hot_fwd, METH_FASTCALL, "zgate.fwd with a new output, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef hot_module = {PyModuleDef_HEAD_INIT, "_hot",
                                        "The hot path of zgate's PyTorch calls (see hot.c).", -1,
                                        hot_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__hot(void) {
  for (int c = 0; c < N_CALLS; c++) {
    if (names_of[c]) continue;
    names_of[c] = PyTuple_New(kCount[c]);
    if (!names_of[c]) return NULL;
    for (int i = 0; i < kCount[c]; i++) {
      PyObject *u = PyUnicode_InternFromString(kNames[c][i]);
      if (!u) return NULL;
      PyTuple_SET_ITEM(names_of[c], i, u);
    }
  }
  if (!H.kw_memory_format && !(H.kw_memory_format = Py_BuildValue("(s)", "memory_format"))) return NULL;
  return PyModule_Create(&hot_module);
}
