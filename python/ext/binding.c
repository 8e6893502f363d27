/* zgate._binding: the one path from Python into libzgate (linked, found beside this module).
 *
 * Each array of a call is read as a DLTensor, in the cheapest way its type offers (chosen once
 * per type by zgate._kinds.classify, cached here):
 *   EXCHANGE  the DLPack C exchange API (type.__dlpack_c_exchange_api__, DLPack 1.x): the
 *             producer fills a DLTensor on our stack; its current stream is asked for CUDA;
 *   BUFFER    the buffer protocol (NumPy: its __dlpack__ refuses bfloat16, and a capsule
 *             costs more); `alt(x)` gives a bfloat16 array's bits as uint16;
 *   DLPACK    x.__dlpack__(max_version=(1, 0)) (then the legacy form), with the consumer
 *             stream `stream(device_id)` for CUDA producers; the tensor's deleter is called
 *             right after the library call;
 *   FALLBACK  the type's calls go to `fallback(op, args...)` (a PyTorch subclass that
 *             dispatches its own operators, such as DTensor).
 * The DLTensor is passed to the library as the producer describes it (rank, strides,
 * byte_offset): validation is the library's. New outputs are made by the kind's
 * `like(x, compact)`; given ones are reported to `written(t)` after the call (PyTorch's
 * version counters). A refused call raises zgate.Error (zgate._errors) with the library's
 * status and message; the GIL is released around the library call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "zgate.h"
#include "zgate_check.h"

/* DLPack 1.x structures, declared here since the dlpack.h found may be 0.x (same DLTensor). */
typedef struct { uint32_t major, minor; } dl_version;
typedef struct dl_managed_v {
  dl_version version;
  void *ctx;
  void (*deleter)(struct dl_managed_v *);
  uint64_t flags;
  DLTensor dl_tensor;
} dl_managed_v;
typedef struct dl_managed {
  DLTensor dl_tensor;
  void *ctx;
  void (*deleter)(struct dl_managed *);
} dl_managed;
typedef struct dl_api_header {
  dl_version version;
  struct dl_api_header *prev;
} dl_api_header;
typedef struct {
  dl_api_header header;
  void *allocator;
  int (*managed_from_py)(void *, dl_managed_v **);
  void *to_py;
  int (*dltensor_from_py)(void *, DLTensor *); /* may be NULL */
  int (*current_stream)(int, int32_t, void **);
} dl_exchange_api;

enum { DL_READ_ONLY = 1, DL_IS_COPIED = 2 };
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_COMPLEX = 5, DL_BOOL = 6 };
enum { DEV_CPU = 1, DEV_CUDA = 2, DEV_CUDA_HOST = 3, DEV_ROCM = 10, DEV_CUDA_MANAGED = 13 };
#define MAX_NDIM ZGATE_MAX_NDIM

enum { M_EXCHANGE, M_BUFFER, M_DLPACK, M_FALLBACK }; /* as zgate._kinds numbers them */

typedef struct {
  int mode, mutable_, cpu_only;
  const dl_exchange_api *api;
  PyObject *like, *written, *fallback, *stream, *alt; /* None where absent */
  PyObject *spec; /* the tuple the fields are borrowed from */
} Kind;

static PyObject *Error;   /* zgate._errors.Error */
static PyObject *kinds;   /* type -> capsule of a Kind */
static PyObject *classify;
static PyTypeObject *last_type; /* the last type looked up, and its Kind */
static Kind *last_kind;

/* zgate.Error(status or None, message); returns NULL. */
static PyObject *fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
  va_end(ap);
  if (!msg) return NULL;
  PyObject *st = status < 0 ? Py_NewRef(Py_None) : PyLong_FromLong(status);
  if (st) {
    PyObject *e = PyObject_CallFunctionObjArgs(Error, st, msg, NULL);
    if (e) {
      PyErr_SetObject(Error, e);
      Py_DECREF(e);
    }
    Py_DECREF(st);
  }
  Py_DECREF(msg);
  return NULL;
}

/* "int32", "bool", "float64", ... for a DLPack dtype. */
static void dtype_words(int code, int bits, int lanes, char *buf, size_t n) {
  static const char *const words[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  if (code == DL_BOOL)
    snprintf(buf, n, "bool");
  else if (code >= 0 && code <= DL_COMPLEX)
    snprintf(buf, n, "%s%d", words[code], bits);
  else
    snprintf(buf, n, "DLPack dtype code %d, %d bits", code, bits);
  if (lanes != 1) snprintf(buf + strlen(buf), n - strlen(buf), "x%d", lanes);
}

/* The library's error for status st: its message, with a refused dtype in words. */
static PyObject *library_error(int st) {
  char msg[1024];
  const char *detail = zgate_last_error();
  unsigned code, bits;
  const char *at = strstr(detail, "dtype (code ");
  if (st == ZGATE_ERR_DTYPE && at && sscanf(at, "dtype (code %u, bits %u)", &code, &bits) == 2) {
    char name[48];
    dtype_words((int)code, (int)bits, 1, name, sizeof name);
    const char *rest = strchr(at, ')');
    snprintf(msg, sizeof msg, "%.*sdtype %s%s", (int)(at - detail), detail, name, rest ? rest + 1 : "");
  } else {
    snprintf(msg, sizeof msg, "%s", detail);
  }
  return *msg ? fail(st, "%s: %s", zgate_status_str(st), msg) : fail(st, "%s", zgate_status_str(st));
}

/* ---- kinds ------------------------------------------------------------------------------ */

static void kind_free(PyObject *cap) {
  Kind *k = PyCapsule_GetPointer(cap, "zgate.kind");
  if (k) Py_XDECREF(k->spec);
  PyMem_Free(k);
}

/* The exchange API of a capsule, or NULL (no exception) where it is not one we read: major
 * version 1 (an older one down the chain of a newer), the two entries we call present. */
static const dl_exchange_api *exchange_api(PyObject *cap) {
  if (!cap || !PyCapsule_IsValid(cap, "dlpack_exchange_api")) return NULL;
  const dl_api_header *h = PyCapsule_GetPointer(cap, "dlpack_exchange_api");
  while (h && h->version.major > 1) h = h->prev;
  const dl_exchange_api *api = (const dl_exchange_api *)h;
  if (!api || api->header.version.major != 1 || !api->current_stream ||
      (!api->dltensor_from_py && !api->managed_from_py))
    return NULL;
  return api;
}

/* The Kind of x's type: cached, else built from zgate._kinds.classify(type), which returns
 * (mode, exchange capsule, like, written, fallback, stream, alt, mutable, cpu_only). */
static Kind *kind_of(PyObject *x) {
  PyTypeObject *t = Py_TYPE(x);
  if (t == last_type) return last_kind;
  PyObject *cap = PyDict_GetItemWithError(kinds, (PyObject *)t);
  if (!cap) {
    if (PyErr_Occurred()) return NULL;
    if (!classify) return PyErr_SetString(PyExc_RuntimeError, "zgate._binding: not configured"), NULL;
    PyObject *spec = PyObject_CallOneArg(classify, (PyObject *)t);
    if (!spec) return NULL;
    Kind *k = PyMem_Calloc(1, sizeof *k);
    if (!k || !PyArg_ParseTuple(spec, "iOOOOOOpp", &k->mode, &cap, &k->like, &k->written,
                                &k->fallback, &k->stream, &k->alt, &k->mutable_, &k->cpu_only)) {
      PyMem_Free(k);
      Py_DECREF(spec);
      return k ? NULL : (Kind *)PyErr_NoMemory();
    }
    k->spec = spec;
    if (k->mode == M_EXCHANGE && !(k->api = exchange_api(cap))) k->mode = M_DLPACK;
    cap = PyCapsule_New(k, "zgate.kind", kind_free);
    if (!cap) {
      Py_DECREF(spec);
      PyMem_Free(k);
      return NULL;
    }
    int r = PyDict_SetItem(kinds, (PyObject *)t, cap);
    Py_DECREF(cap); /* the dict holds it */
    if (r) return NULL;
  }
  last_type = t;
  return last_kind = PyCapsule_GetPointer(cap, "zgate.kind");
}

/* ---- views: one array of a call read as a DLTensor ----------------------------------------- */

typedef struct {
  DLTensor t;
  int64_t shape[MAX_NDIM], strides[MAX_NDIM];
  Py_buffer buf;
  int has_buf;
  void *managed;   /* a DLPack tensor taken from a capsule: its deleter called by release */
  int versioned;
  PyObject *held;  /* an object the view reads (alt's uint16 view of a bfloat16 array) */
} View;

static void release(View *v) {
  if (v->has_buf) PyBuffer_Release(&v->buf);
  v->has_buf = 0;
  Py_CLEAR(v->held);
  if (v->managed) {
    PyObject *et, *ev, *tb; /* a deleter may run Python code: not with an exception set */
    PyErr_Fetch(&et, &ev, &tb);
    if (v->versioned) {
      dl_managed_v *m = v->managed;
      if (m->deleter) m->deleter(m);
    } else {
      dl_managed *m = v->managed;
      if (m->deleter) m->deleter(m);
    }
    PyErr_Restore(et, ev, tb);
    v->managed = NULL;
  }
}

/* The DLPack dtype of a buffer format (struct module letters); code -1 when unknown. */
static void buffer_dtype(const char *f, Py_ssize_t itemsize, DLDataType *d) {
  if (*f == '@' || *f == '=' || *f == '<') f++; /* native order: the hosts zgate builds for */
  int code = -1;
  if (f[0] && (!f[1] || (f[0] == 'Z' && f[2] == 0))) {
    if (f[0] == 'Z') code = DL_COMPLEX;
    else if (strchr("efd", f[0])) code = DL_FLOAT;
    else if (strchr("bhilqn", f[0])) code = DL_INT;
    else if (strchr("BHILQN", f[0])) code = DL_UINT;
    else if (f[0] == '?') code = DL_BOOL;
  }
  d->code = (uint8_t)(code < 0 ? 3 : code); /* 3: opaque, which the library refuses */
  d->bits = (uint8_t)(itemsize * 8);
  d->lanes = 1;
}

static int view_buffer(View *v, Kind *k, PyObject *x, const char *name, int output) {
  int bf16 = 0;
  if (PyObject_GetBuffer(x, &v->buf, PyBUF_RECORDS_RO)) {
    if (k->alt == Py_None || (!PyErr_ExceptionMatches(PyExc_BufferError) &&
                                  !PyErr_ExceptionMatches(PyExc_ValueError)))
      return -1;
    PyErr_Clear();
    v->held = PyObject_CallOneArg(k->alt, x); /* uint16 bits of bfloat16, or None */
    if (!v->held) return -1;
    if (v->held == Py_None) {
      PyObject *dt = PyObject_GetAttrString(x, "dtype");
      if (dt) fail(ZGATE_ERR_DTYPE, "%s: dtype %S is not float32, float16 or bfloat16", name, dt);
      Py_XDECREF(dt);
      return -1;
    }
    if (PyObject_GetBuffer(v->held, &v->buf, PyBUF_RECORDS_RO)) return -1;
    bf16 = 1;
  }
  v->has_buf = 1;
  Py_buffer *b = &v->buf;
  if (output && b->readonly) return fail(-1, "%s is a read-only array", name), -1;
  if (b->format[0] == '>' || b->format[0] == '!')
    return fail(ZGATE_ERR_DTYPE, "%s has byte-swapped dtype (format '%s')", name, b->format), -1;
  if (b->ndim > MAX_NDIM)
    return fail(ZGATE_ERR_NDIM, "%s has %d dimensions; zgate takes at most %d", name, b->ndim,
                MAX_NDIM), -1;
  memset(&v->t, 0, sizeof v->t);
  buffer_dtype(b->format, b->itemsize, &v->t.dtype);
  if (bf16) v->t.dtype.code = DL_BFLOAT;
  for (int i = 0; i < b->ndim; i++) {
    if (b->strides[i] % b->itemsize)
      return fail(ZGATE_ERR_MISALIGNED, "%s has byte strides not multiples of its element size %zd",
                  name, b->itemsize), -1;
    v->shape[i] = b->shape[i];
    v->strides[i] = b->strides[i] / b->itemsize;
  }
  v->t.data = b->buf;
  v->t.device.device_type = kDLCPU;
  v->t.ndim = b->ndim;
  v->t.shape = v->shape;
  v->t.strides = v->strides;
  return 0;
}

static PyObject *s_dlpack, *s_dlpack_device, *kw_mv, *kw_mv_stream, *kw_stream, *max_version;

/* x.__dlpack__(max_version=(1, 0)[, stream=]) or, from a 0.x producer (TypeError),
 * x.__dlpack__([stream=]). */
static PyObject *capsule_of(PyObject *x, PyObject *stream) {
  PyObject *args[3] = {x, max_version, stream};
  size_t n = 1 | PY_VECTORCALL_ARGUMENTS_OFFSET;
  PyObject *c = PyObject_VectorcallMethod(s_dlpack, args, n, stream ? kw_mv_stream : kw_mv);
  if (c || !PyErr_ExceptionMatches(PyExc_TypeError)) return c;
  PyErr_Clear();
  args[1] = stream;
  return PyObject_VectorcallMethod(s_dlpack, args, n, stream ? kw_stream : NULL);
}

/* The managed tensor of a capsule, the capsule marked used; versioned or not. */
static int take_capsule(View *v, PyObject *cap, const char *name, int output) {
  if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    dl_managed_v *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
    if (m->version.major != 1) /* a layout we do not read: left to the capsule */
      return fail(-1, "%s: DLPack version %u.%u; zgate reads 1.x", name, m->version.major,
                  m->version.minor), -1;
    if (PyCapsule_SetName(cap, "used_dltensor_versioned")) return -1;
    v->managed = m;
    v->versioned = 1;
    v->t = m->dl_tensor;
    if (output && m->flags & (DL_READ_ONLY | DL_IS_COPIED))
      return fail(-1, "%s is %s (its DLPack export says so) and cannot be written", name,
                  m->flags & DL_READ_ONLY ? "read-only" : "a copy"), -1;
    return 0;
  }
  if (PyCapsule_IsValid(cap, "dltensor")) {
    dl_managed *m = PyCapsule_GetPointer(cap, "dltensor");
    if (PyCapsule_SetName(cap, "used_dltensor")) return -1;
    v->managed = m;
    v->t = m->dl_tensor;
    return 0;
  }
  return fail(-1, "%s: __dlpack__() did not return an unused DLPack capsule", name), -1;
}

static int is_cuda_like(int dev) { return dev == DEV_CUDA || dev == DEV_ROCM || dev == DEV_CUDA_MANAGED; }

/* The consumer stream of a call on CUDA device `id` for a producer of kind k, as zgate takes
 * it (0: the legacy default stream). */
static int kind_stream(Kind *k, int id, void **s) {
  *s = NULL;
  if (k->mode == M_EXCHANGE) {
    if (k->api->current_stream(DEV_CUDA, id, s)) return -1;
    return 0;
  }
  if (k->stream == Py_None) return 0;
  PyObject *i = PyLong_FromLong(id);
  PyObject *r = i ? PyObject_CallOneArg(k->stream, i) : NULL;
  Py_XDECREF(i);
  if (!r) return -1;
  *s = PyLong_AsVoidPtr(r);
  Py_DECREF(r);
  return *s == NULL && PyErr_Occurred() ? -1 : 0;
}

static int view_dlpack(View *v, Kind *k, PyObject *x, const char *name, int output, void *stream) {
  PyObject *s = NULL;
  if (k->alt != Py_None) { /* the object to export instead */
    if (!(v->held = PyObject_CallOneArg(k->alt, x))) return -1;
    x = v->held;
  }
  if (!k->cpu_only) {
    PyObject *d = PyObject_CallMethodNoArgs(x, s_dlpack_device);
    if (!d) return -1;
    long dev = -1, id = 0;
    if (PyTuple_Check(d) && PyTuple_GET_SIZE(d) == 2) {
      dev = PyLong_AsLong(PyTuple_GET_ITEM(d, 0));
      id = PyLong_AsLong(PyTuple_GET_ITEM(d, 1));
    }
    Py_DECREF(d);
    if (PyErr_Occurred()) return -1;
    /* the first array of a call, before the call's stream is known: its kind's stream */
    if (is_cuda_like((int)dev) && !stream && kind_stream(k, (int)id, &stream)) return -1;
    /* DLPack's stream numbers: 1 is CUDA's legacy default stream */
    if (is_cuda_like((int)dev) && !(s = PyLong_FromVoidPtr(stream ? stream : (void *)1))) return -1;
  }
  PyObject *cap = capsule_of(x, s);
  Py_XDECREF(s);
  if (!cap) return -1;
  int r = take_capsule(v, cap, name, output);
  Py_DECREF(cap);
  return r;
}

/* x read as v->t; `stream`: the call's stream for DLPack producers. On an exception from the
 * producer, a zgate.Error naming the array, the producer's exception as its cause. */
static int view_of(View *v, PyObject *x, const char *name, int output, void *stream) {
  memset(v, 0, sizeof *v);
  Kind *k = kind_of(x);
  if (!k) return -1;
  int r;
  if (k->mode == M_EXCHANGE) {
    if (k->api->dltensor_from_py) {
      r = k->api->dltensor_from_py(x, &v->t);
    } else {
      dl_managed_v *m = NULL;
      r = k->api->managed_from_py(x, &m);
      if (!r) {
        v->managed = m;
        v->versioned = 1;
        v->t = m->dl_tensor;
      }
    }
  } else if (k->mode == M_BUFFER) {
    r = view_buffer(v, k, x, name, output);
  } else if (k->mode == M_DLPACK) {
    r = view_dlpack(v, k, x, name, output, stream);
  } else {
    return fail(-1, "%s is a %s; pass it with arrays of its own kind", name, Py_TYPE(x)->tp_name), -1;
  }
  if (r && !PyErr_ExceptionMatches(Error)) { /* the producer's exception, as the cause */
    PyObject *t, *cause, *tb;
    PyErr_Fetch(&t, &cause, &tb);
    PyErr_NormalizeException(&t, &cause, &tb);
    PyObject *why = cause ? PyObject_Str(cause) : NULL; /* its first line (C++ traces follow) */
    PyObject *lines = why ? PyUnicode_Splitlines(why, 0) : NULL;
    fail(-1, "%s: could not read %s as a DLPack tensor: %S", name, Py_TYPE(x)->tp_name,
         lines && PyList_GET_SIZE(lines) ? PyList_GET_ITEM(lines, 0) : Py_None);
    Py_XDECREF(why);
    Py_XDECREF(lines);
    PyObject *t2, *e, *tb2;
    PyErr_Fetch(&t2, &e, &tb2);
    PyErr_NormalizeException(&t2, &e, &tb2);
    if (e) PyException_SetCause(e, cause); /* steals cause */
    else Py_XDECREF(cause);
    PyErr_Restore(t2, e, tb2);
    Py_XDECREF(t);
    Py_XDECREF(tb);
  }
  if (r) release(v);
  return r;
}

/* ---- arguments --------------------------------------------------------------------------- */

static int threads_of(PyObject *n, int *out) {
  if (PyBool_Check(n) || !PyIndex_Check(n))
    return fail(ZGATE_ERR_OPTIONS, "options: num_threads is %R (%s); it takes a whole number: "
                "0 (the OpenMP default) or a thread count", n, Py_TYPE(n)->tp_name), -1;
  PyObject *i = PyNumber_Index(n);
  if (!i) return -1;
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
  Py_DECREF(i);
  if (v == -1 && PyErr_Occurred()) return -1;
  if (overflow || v < INT32_MIN || v > INT32_MAX)
    return fail(ZGATE_ERR_OPTIONS, "options: num_threads is %R, beyond a C int; it takes 0 "
                "(the OpenMP default) or a thread count", n), -1;
  *out = (int)v;
  return 0;
}

/* True or False (a NumPy bool too); anything else is refused, not read as truthy. */
static int flag_of(PyObject *v, const char *name, int *out) {
  const char *t = Py_TYPE(v)->tp_name;
  if (PyBool_Check(v) || !strcmp(t, "numpy.bool") || !strcmp(t, "numpy.bool_")) {
    *out = PyObject_IsTrue(v);
    return *out < 0 ? -1 : 0;
  }
  return fail(-1, "%s is %R (%s); it takes True or False", name, v, t), -1;
}

static int is_none(PyObject *x) { return x == Py_None; }

/* Whether t's elements are laid out compact, row-major (size-1 dimensions' strides aside). */
static int compact(const DLTensor *t) {
  if (!t->strides) return 1;
  int64_t want = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] == 0) return 1;
    if (t->shape[i] != 1 && t->strides[i] != want) return 0;
    want *= t->shape[i];
  }
  return 1;
}

/* A new output like x (read as *t): the kind's like(x), with its keywords for a strided x. */
static PyObject *new_like(PyObject *x, const DLTensor *t) {
  Kind *k = kind_of(x);
  if (!k) return NULL;
  if (k->like == Py_None)
    return fail(-1, "cannot make outputs like a %s; pass them (dz=, dout_scaled=, out=)",
                Py_TYPE(x)->tp_name);
  PyObject *fn = PyTuple_GET_ITEM(k->like, 0), *kw = PyTuple_GET_ITEM(k->like, 1);
  if (kw == Py_None || compact(t)) return PyObject_CallOneArg(fn, x);
  PyObject *args = PyTuple_Pack(1, x);
  PyObject *r = args ? PyObject_Call(fn, args, kw) : NULL;
  Py_XDECREF(args);
  return r;
}

/* After a call wrote into t (a given output): the kind's written(t). */
static int report_written(PyObject *t) {
  Kind *k = kind_of(t);
  if (!k) return -1;
  if (k->written == Py_None) return 0;
  PyObject *r = PyObject_CallOneArg(k->written, t);
  Py_XDECREF(r);
  return r ? 0 : -1;
}

static int on_supported_device(const DLTensor *t) {
  int d = (int)t->device.device_type;
  return d == DEV_CPU || d == DEV_CUDA || d == DEV_CUDA_HOST || d == DEV_CUDA_MANAGED;
}

static PyObject *to_fallback(Kind *k, const char *op, PyObject *const *a, Py_ssize_t n) {
  PyObject *args[8];
  args[0] = PyUnicode_FromString(op);
  if (!args[0]) return NULL;
  for (Py_ssize_t i = 0; i < n; i++) args[i + 1] = a[i];
  PyObject *r = PyObject_Vectorcall(k->fallback, args, (size_t)n + 1, NULL);
  Py_DECREF(args[0]);
  return r;
}

/* ---- the calls ----------------------------------------------------------------------------- */

enum { OP_BWD, OP_FWD, OP_REF_BWD, OP_REF_FWD };
static const char *const kOpName[] = {"bwd", "fwd", "reference_bwd", "reference_fwd"};
static const char *const kNames[2][5] = {{"dout", "z", "o", "dz", "dout_scaled"}, {"o", "z", "out"}};
static PyObject *reference_like; /* zgate._kinds.reference_like(shape): a float64 NumPy array */

static PyObject *shape_of(const DLTensor *t) {
  PyObject *s = PyTuple_New(t->ndim);
  for (int i = 0; s && i < t->ndim; i++) {
    PyObject *d = PyLong_FromLongLong(t->shape[i]);
    if (!d) Py_CLEAR(s);
    else PyTuple_SET_ITEM(s, i, d);
  }
  return s;
}

/* One call: op on the inputs a[0..nin) into the outputs a[nin..nin+nout) (None: new).
 * inplace (bwd): dout is dout_scaled. `args`, `nargs`: the call's own, for a fallback. */
static PyObject *run(int op, PyObject *const *a, int nin, int nout, int inplace, int threads,
                     PyObject *const *args, Py_ssize_t nargs) {
  const int bwd = op == OP_BWD || op == OP_REF_BWD, ref = op >= OP_REF_BWD;
  const char *const *names = kNames[!bwd];
  const int n = nin + nout;
  View v[5];
  PyObject *obj[5] = {NULL, NULL, NULL, NULL, NULL}; /* the arrays, outputs as new references */
  int given[5] = {0, 0, 0, 0, 0}, viewed = 0, st = ZGATE_OK;
  PyObject *result = NULL;
  for (int i = 0; i < nin; i++) obj[i] = a[i];
  void *stream = NULL;
  for (; viewed < nin; viewed++) {
    int out = viewed == 0 && inplace;
    if (view_of(&v[viewed], a[viewed], names[viewed], out, stream)) {
      Kind *k = viewed == 0 && !ref ? kind_of(a[0]) : NULL;
      if (k && k->fallback != Py_None) { /* a device the producer cannot describe: its turn */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        result = to_fallback(k, kOpName[op], args, nargs);
        if (result == Py_NotImplemented) {
          Py_CLEAR(result);
          PyErr_Restore(et, ev, tb);
        } else {
          Py_XDECREF(et);
          Py_XDECREF(ev);
          Py_XDECREF(tb);
        }
      }
      goto done;
    }
    if (viewed == 0 && !ref) {
      Kind *k = kind_of(a[0]);
      if (k->fallback != Py_None && !on_supported_device(&v[0].t)) { /* an NPU tensor, say */
        release(&v[0]);
        viewed = 0;
        result = to_fallback(k, kOpName[op], args, nargs);
        goto done;
      }
      if (is_cuda_like((int)v[0].t.device.device_type) && kind_stream(k, v[0].t.device.device_id, &stream))
        goto done;
    }
  }
  for (int i = nin; i < n; i++) {
    if (inplace && i == 4) continue;
    given[i] = !is_none(a[i]);
    if (given[i]) {
      obj[i] = Py_NewRef(a[i]);
    } else {
      if (ref) {
        PyObject *shape = shape_of(&v[0].t);
        obj[i] = shape ? PyObject_CallOneArg(reference_like, shape) : NULL;
        Py_XDECREF(shape);
      } else {
        obj[i] = new_like(a[0], &v[0].t);
      }
      if (!obj[i]) goto done;
    }
    if (view_of(&v[i], obj[i], names[i], 1, stream)) goto done;
    viewed = i + 1;
  }
  zgate_options o = ZGATE_OPTIONS_INIT;
  o.num_threads = threads;
  o.cuda_stream = stream;
  DLTensor *t4 = inplace ? &v[0].t : &v[4].t;
  Py_BEGIN_ALLOW_THREADS
  switch (op) {
  case OP_BWD: st = zgate_bwd(&v[0].t, &v[1].t, &v[2].t, &v[3].t, t4, &o); break;
  case OP_FWD: st = zgate_fwd(&v[0].t, &v[1].t, &v[2].t, &o); break;
  case OP_REF_BWD: st = zgate_bwd_reference(&v[0].t, &v[1].t, &v[2].t, &v[3].t, t4); break;
  default: st = zgate_fwd_reference(&v[0].t, &v[1].t, &v[2].t); break;
  }
  Py_END_ALLOW_THREADS
  for (int i = 0; i < viewed; i++) release(&v[i]);
  viewed = 0;
  if (st != ZGATE_OK) {
    library_error(st);
    goto done;
  }
  if (inplace && report_written(a[0])) goto done;
  for (int i = nin; i < n; i++)
    if (given[i] && report_written(obj[i])) goto done;
  if (!bwd) {
    result = Py_NewRef(obj[2]);
  } else {
    result = PyTuple_Pack(2, obj[3], inplace ? a[0] : obj[4]);
  }
done:
  for (int i = 0; i < viewed; i++) release(&v[i]);
  for (int i = nin; i < n; i++) Py_XDECREF(obj[i]);
  return result;
}

static int nargs_is(const char *f, Py_ssize_t got, Py_ssize_t want) {
  if (got == want) return 1;
  PyErr_Format(PyExc_TypeError, "zgate._binding.%s takes %zd arguments (%zd given)", f, want, got);
  return 0;
}

/* The kind of the first array, or the fallback's answer in *r for a FALLBACK kind. */
static Kind *entry_kind(const char *op, PyObject *const *a, Py_ssize_t n, PyObject **r) {
  Kind *k = kind_of(a[0]);
  *r = NULL;
  if (k && k->mode == M_FALLBACK) {
    *r = to_fallback(k, op, a, n);
    return NULL;
  }
  return k;
}

static PyObject *immutable(Kind *k, PyObject *x, const char *what) {
  (void)k;
  return fail(-1, "%s arrays are immutable: outputs (%s) cannot be given for them",
              Py_TYPE(x)->tp_name, what);
}

/* bwd(dout, z, o, dz, dout_scaled, inplace, num_threads) -> (dz, dout_scaled) */
static PyObject *py_bwd(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  if (!nargs_is("bwd", n, 7)) return NULL;
  int threads, inplace;
  if (threads_of(a[6], &threads) || flag_of(a[5], "inplace", &inplace)) return NULL;
  PyObject *r;
  Kind *k = entry_kind("bwd", a, n, &r);
  if (!k) return r;
  if (inplace && !is_none(a[4]) && a[4] != a[0])
    return fail(-1, "inplace=True writes dout_scaled into dout; do not pass dout_scaled as well");
  if ((inplace || !is_none(a[3]) || !is_none(a[4])) && !k->mutable_)
    return immutable(k, a[0], "dz=, dout_scaled=, inplace=");
  return run(OP_BWD, a, 3, 2, inplace, threads, a, n);
}

/* fwd(o, z, out, num_threads) -> out */
static PyObject *py_fwd(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  if (!nargs_is("fwd", n, 4)) return NULL;
  int threads;
  if (threads_of(a[3], &threads)) return NULL;
  PyObject *r;
  Kind *k = entry_kind("fwd", a, n, &r);
  if (!k) return r;
  if (!is_none(a[2]) && !k->mutable_) return immutable(k, a[0], "out=");
  return run(OP_FWD, a, 2, 1, 0, threads, a, n);
}

/* reference_bwd(dout, z, o, dz, dout_scaled) -> (dz, dout_scaled); new outputs float64 NumPy */
static PyObject *py_reference_bwd(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  if (!nargs_is("reference_bwd", n, 5)) return NULL;
  return run(OP_REF_BWD, a, 3, 2, a[4] == a[0], 0, a, n);
}

static PyObject *py_reference_fwd(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  if (!nargs_is("reference_fwd", n, 3)) return NULL;
  return run(OP_REF_FWD, a, 2, 1, 0, 0, a, n);
}

/* check_tensor(quantity, got, ref, dout, z, o) -> dict: zgate_check_tensor's statistics of
 * got (CPU arrays; dout None for the forward's out). */
static PyObject *py_check_tensor(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  if (!nargs_is("check_tensor", n, 6)) return NULL;
  long q = PyLong_AsLong(a[0]);
  if (q == -1 && PyErr_Occurred()) return NULL;
  static const char *const names[] = {"got", "ref", "dout", "z", "o"};
  View v[5];
  int viewed = 0, rc = -1;
  for (; viewed < 5; viewed++)
    if (viewed != 2 || !is_none(a[3]))
      if (view_of(&v[viewed], a[viewed + 1], names[viewed], 0, NULL)) break;
  zgate_check_stats st;
  zgate_check_stats_init(&st);
  if (viewed == 5)
    rc = zgate_check_tensor((zgate_check_quantity)q, &v[0].t, &v[1].t, is_none(a[3]) ? NULL : &v[2].t,
                            &v[3].t, &v[4].t, &st);
  for (int i = 0; i < viewed; i++)
    if (i != 2 || !is_none(a[3])) release(&v[i]);
  if (viewed < 5) return NULL;
  if (rc) return fail(-1, "check_tensor: the tensors are unusable (host memory, equal shapes, "
                      "float32/float16/bfloat16/float64)");
  return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:d,s:d,s:d,s:d,s:d,s:L}", "count", (long long)st.count,
                       "failures", (long long)st.failures, "nan_mismatches", (long long)st.nan_mismatches,
                       "inf_mismatches", (long long)st.inf_mismatches, "first_fail",
                       (long long)st.first_fail, "first_got", st.first_got, "first_ref", st.first_ref,
                       "max_err_units", st.max_err_units, "max_bound_ratio", st.max_bound_ratio,
                       "max_rel_err", st.max_rel_err, "worst_index", (long long)st.worst_index);
}

/* info() -> dict: what the library was built with and chooses, and its path. */
static PyObject *py_info(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  Dl_info where;
  const char *path = dladdr((void *)zgate_version, &where) && where.dli_fname ? where.dli_fname : "";
  PyObject *built = PyUnicode_FromString(zgate_cpu_isas_built());
  PyObject *isas = built ? PyUnicode_Split(built, NULL, -1) : NULL;
  Py_XDECREF(built);
  PyObject *avail = isas ? PyList_New(0) : NULL;
  for (Py_ssize_t i = 0; avail && i < PyList_GET_SIZE(isas); i++) {
    const char *isa = PyUnicode_AsUTF8(PyList_GET_ITEM(isas, i));
    if (!isa || (zgate_cpu_isa_available(isa) && PyList_Append(avail, PyList_GET_ITEM(isas, i))))
      Py_CLEAR(avail);
  }
  PyObject *r = avail ? Py_BuildValue("{s:s,s:s,s:O,s:O,s:s,s:O,s:s}", "version", zgate_version(),
                                      "library", path, "cpu_isas_built", isas, "cpu_isas_available",
                                      avail, "cpu_isa_chosen", zgate_cpu_isa_chosen(), "cuda_built",
                                      zgate_cuda_built() ? Py_True : Py_False, "build_info",
                                      zgate_build_info())
                      : NULL;
  Py_XDECREF(isas);
  Py_XDECREF(avail);
  return r;
}

/* configure(classify, reference_like): zgate._kinds' functions (the package's __init__). */
static PyObject *py_configure(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  if (!nargs_is("configure", n, 2)) return NULL;
  Py_XSETREF(classify, Py_NewRef(a[0]));
  Py_XSETREF(reference_like, Py_NewRef(a[1]));
  PyDict_Clear(kinds);
  last_type = NULL;
  Py_RETURN_NONE;
}

/* address(obj) -> int: the address of obj's buffer (to align new NumPy arrays). */
static PyObject *py_address(PyObject *self, PyObject *obj) {
  (void)self;
  Py_buffer b;
  if (PyObject_GetBuffer(obj, &b, PyBUF_SIMPLE)) return NULL;
  PyObject *r = PyLong_FromVoidPtr(b.buf);
  PyBuffer_Release(&b);
  return r;
}

#define FASTCALL(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL
static PyMethodDef methods[] = {
    {"bwd", FASTCALL(py_bwd), "bwd(dout, z, o, dz, dout_scaled, inplace, num_threads)"},
    {"fwd", FASTCALL(py_fwd), "fwd(o, z, out, num_threads)"},
    {"reference_bwd", FASTCALL(py_reference_bwd), "reference_bwd(dout, z, o, dz, dout_scaled)"},
    {"reference_fwd", FASTCALL(py_reference_fwd), "reference_fwd(o, z, out)"},
    {"check_tensor", FASTCALL(py_check_tensor), "check_tensor(quantity, got, ref, dout, z, o)"},
    {"info", py_info, METH_NOARGS, "info() -> dict"},
    {"configure", FASTCALL(py_configure), "configure(classify, reference_like)"},
    {"address", py_address, METH_O, "address(obj) -> the address of obj's buffer"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_binding",
                                    "zgate's binding of libzgate (python/ext/binding.c).", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__binding(void) {
  PyObject *errors = PyImport_ImportModule("zgate._errors");
  if (!errors) return NULL;
  Error = PyObject_GetAttrString(errors, "Error");
  Py_DECREF(errors);
  if (!Error || !(kinds = PyDict_New())) return NULL;
  if (!(s_dlpack = PyUnicode_InternFromString("__dlpack__")) ||
      !(s_dlpack_device = PyUnicode_InternFromString("__dlpack_device__")) ||
      !(kw_mv = Py_BuildValue("(s)", "max_version")) ||
      !(kw_mv_stream = Py_BuildValue("(ss)", "max_version", "stream")) ||
      !(kw_stream = Py_BuildValue("(s)", "stream")) || !(max_version = Py_BuildValue("(ii)", 1, 0)))
    return NULL;
  return PyModule_Create(&module);
}
