/* zgate._binding: the one path from Python into libzgate (linked, found beside this module).
 *
 * Each array of a call is read as a DLTensor, in the cheapest way its type offers (chosen once
 * per type by zgate._kinds.classify, which documents the choices; cached here):
 *   EXCHANGE  the DLPack C exchange API (type.__dlpack_c_exchange_api__, DLPack 1.x): the
 *             producer fills a DLTensor on our stack (PyTorch);
 *   BUFFER    the buffer protocol (NumPy);
 *   CAI       the CUDA Array Interface, v2 or v3 (CuPy, Numba...): one dict per array, the
 *             device that of its data pointer, asked of the CUDA driver;
 *   DLPACK    x.__dlpack__(max_version=(1, 0)) (then the legacy form); the tensor's deleter is
 *             called right after the library call;
 *   FALLBACK  the type's calls go to its fallback (a PyTorch subclass with its own operators).
 * The DLTensor goes to the library as the producer describes it (rank, strides, byte_offset):
 * validation is the library's. A refused call raises zgate.Error (zgate._errors) with the
 * library's status and message; the GIL is released around the library call.
 *
 * Stream: a call runs on one CUDA stream, named by the first of its CUDA arrays that names
 * one (EXCHANGE, DLPACK: the framework's current stream; CAI: its dict's 'stream'), else the
 * legacy default stream. DLPACK arrays make their data ready on it (__dlpack__(stream=)); so
 * does a CAI array that names another stream or has no typestr for its dtype (bfloat16),
 * where its type has __dlpack__.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "zgate.h"
#include "zgate_check.h"
#include "zgate_private.h"
#include "py_limited.h"

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
  void *allocator, *managed_from_py, *to_py;
  int (*dltensor_from_py)(void *, DLTensor *); /* optional: NULL where not offered */
  int (*current_stream)(int, int32_t, void **);
} dl_exchange_api;

enum { DL_READ_ONLY = 1, DL_IS_COPIED = 2 };
/* DLPack 0.8's kDLBool, which an older dlpack.h lacks (its other codes are dlpack.h's). */
enum { DL_BOOL = 6 };
#define MAX_NDIM ZGATE_MAX_NDIM

enum { M_EXCHANGE, M_BUFFER, M_CAI, M_DLPACK, M_FALLBACK }; /* as zgate._kinds numbers them */

typedef struct {
  int mode, mutable_;
  const dl_exchange_api *api;
  PyObject *like, *written, *fallback, *stream, *alt; /* None where absent */
  PyObject *spec; /* the tuple the fields are borrowed from */
} Kind;

/* What the arrays of one call have settled so far: its CUDA stream, once an array named
 * one, and the device of its first CUDA array (-1: none yet). */
typedef struct {
  void *stream;
  int stream_known, device;
} Call;

static PyObject *Error;   /* zgate._errors.Error */
static PyObject *kinds;   /* type -> capsule of a Kind */
static PyObject *classify;
static PyTypeObject *last_type; /* the last type looked up, and its Kind */
static Kind *last_kind;

/* Raises zgate.Error(status, message) (status < 0: None, a refusal of the binding's own);
 * returns NULL. */
static PyObject *fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
  va_end(ap);
  PyObject *args = !msg ? NULL : status < 0 ? Py_BuildValue("(ON)", Py_None, msg)
                                            : Py_BuildValue("(iN)", status, msg);
  if (args) PyErr_SetObject(Error, args);
  Py_XDECREF(args);
  return NULL;
}

/* A DLPack dtype in the words of NumPy and PyTorch ("int32", "bool"); NULL for a code
 * they have no word for. */
static const char *dtype_words(DLDataType d, char *buf, size_t n) {
  static const char *const words[] = {"int", "uint", "float", "opaque", "bfloat", "complex"};
  if (d.code == DL_BOOL) return "bool";
  if (d.code > kDLComplex) return NULL;
  snprintf(buf, n, "%s%u", words[d.code], (unsigned)d.bits);
  return buf;
}

/* The library's refusal of a call as zgate.Error(status, message, tensor, dim), read from
 * the record validation keeps (zgate_private.h); a refused dtype in words. reference: the
 * call was a reference, which takes float64 too. */
static PyObject *library_error(int st, int reference) {
  const zg_refusal *r = zg_last_refusal();
  const char *detail = zgate_last_error(), *words;
  char buf[16];
  PyObject *msg;
  if (st == ZGATE_ERR_DTYPE && r->tensor && (words = dtype_words(r->dtype, buf, sizeof buf)))
    msg = PyUnicode_FromFormat("%s: %s: dtype %s is not float32, float16 or bfloat16%s",
                               zgate_status_str(st), r->tensor, words, reference ? " or float64" : "");
  else
    msg = PyUnicode_FromFormat(*detail ? "%s: %s" : "%s%s", zgate_status_str(st), detail);
  PyObject *dim = r->dim >= 0 ? PyLong_FromLong(r->dim) : Py_NewRef(Py_None);
  PyObject *args = msg && dim ? Py_BuildValue("(iOzO)", st, msg, r->tensor, dim) : NULL;
  if (args) PyErr_SetObject(Error, args);
  Py_XDECREF(args);
  Py_XDECREF(msg);
  Py_XDECREF(dim);
  return NULL;
}

/* ---- kinds ------------------------------------------------------------------------------ */

static void kind_free(PyObject *cap) {
  Kind *k = PyCapsule_GetPointer(cap, "zgate.kind");
  if (k) Py_XDECREF(k->spec);
  PyMem_Free(k);
}

/* The exchange API of a capsule, or NULL (no exception) where it is not one we read: major
 * version 1 (an older one down the chain of a newer), the two entries we call present (a
 * producer without dltensor_from_py is read through __dlpack__). */
static const dl_exchange_api *exchange_api(PyObject *cap) {
  if (!cap || !PyCapsule_IsValid(cap, "dlpack_exchange_api")) return NULL;
  const dl_api_header *h = PyCapsule_GetPointer(cap, "dlpack_exchange_api");
  while (h && h->version.major > 1) h = h->prev;
  const dl_exchange_api *api = (const dl_exchange_api *)h;
  return api && api->header.version.major == 1 && api->current_stream && api->dltensor_from_py
             ? api : NULL;
}

/* A new Kind for type t from zgate._kinds.classify(t), in a capsule kept in `kinds`
 * (borrowed), or NULL with the exception set. */
static PyObject *new_kind(PyTypeObject *t) {
  if (!classify) return PyErr_SetString(PyExc_RuntimeError, "zgate._binding: not configured"), NULL;
  PyObject *spec = PyObject_CallOneArg(classify, (PyObject *)t), *api, *cap = NULL;
  Kind *k = spec ? PyMem_Calloc(1, sizeof *k) : NULL;
  if (spec && !k) PyErr_NoMemory();
  if (!k || !PyArg_ParseTuple(spec, "iOOOOOOp", &k->mode, &api, &k->like, &k->written,
                              &k->fallback, &k->stream, &k->alt, &k->mutable_) ||
      !(cap = PyCapsule_New(k, "zgate.kind", kind_free))) {
    Py_XDECREF(spec);
    PyMem_Free(k);
    return NULL;
  }
  k->spec = spec;
  if (k->mode == M_EXCHANGE && !(k->api = exchange_api(api))) k->mode = M_DLPACK;
  int r = PyDict_SetItem(kinds, (PyObject *)t, cap);
  Py_DECREF(cap); /* the dict holds it */
  return r ? NULL : cap;
}

/* The Kind of x's type: the last one looked up, else from `kinds`, else a new one. */
static Kind *kind_of(PyObject *x) {
  PyTypeObject *t = Py_TYPE(x);
  if (t == last_type) return last_kind;
  PyObject *cap = PyDict_GetItemWithError(kinds, (PyObject *)t);
  if (!cap && (PyErr_Occurred() || !(cap = new_kind(t)))) return NULL;
  last_type = t;
  return last_kind = PyCapsule_GetPointer(cap, "zgate.kind");
}

static int is_cuda_like(int dev) { return dev == kDLCUDA || dev == kDLROCM || dev == kDLCUDAManaged; }

/* The call's stream from kind k's framework, for its array on CUDA device `id`. */
static int kind_stream(Kind *k, int id, Call *c) {
  c->stream = NULL;
  c->stream_known = 1;
  if (k->mode == M_EXCHANGE) return k->api->current_stream(kDLCUDA, id, &c->stream) ? -1 : 0;
  if (k->stream == Py_None) return 0; /* the legacy default stream */
  PyObject *i = PyLong_FromLong(id);
  PyObject *r = i ? PyObject_CallOneArg(k->stream, i) : NULL;
  Py_XDECREF(i);
  if (r) c->stream = PyLong_AsVoidPtr(r);
  Py_XDECREF(r);
  return !r || PyErr_Occurred() ? -1 : 0;
}

/* ---- views: one array of a call read as a DLTensor ----------------------------------------- */

typedef struct {
  DLTensor t;
  int64_t shape[MAX_NDIM], strides[MAX_NDIM];
  Py_buffer buf; /* held where buf.obj is not NULL */
  void *managed;   /* a DLPack tensor taken from a capsule: its deleter called by release */
  int versioned;
  PyObject *held;  /* an object the view reads (alt's uint16 view of a bfloat16 array) */
} View;

static void release(View *v) {
  if (v->buf.obj) PyBuffer_Release(&v->buf); /* sets buf.obj NULL */
  Py_CLEAR(v->held);
  if (v->managed) {
    PyObject *et, *ev, *tb; /* a deleter may run Python code: not with an exception set */
    PyErr_Fetch(&et, &ev, &tb);
    dl_managed_v *mv = v->managed;
    dl_managed *m = v->managed;
    if (v->versioned && mv->deleter) mv->deleter(mv);
    if (!v->versioned && m->deleter) m->deleter(m);
    PyErr_Restore(et, ev, tb);
    v->managed = NULL;
  }
}

/* v->t's shape and strides: v->shape, v->strides (in bytes, made element strides; strided 0:
 * compact), refusing strides that are not multiples of the element size. */
static int set_layout(View *v, const char *name, int ndim, int strided, int64_t itemsize) {
  v->t.ndim = ndim;
  v->t.shape = v->shape;
  v->t.strides = strided ? v->strides : NULL;
  for (int i = 0; strided && i < ndim; i++) {
    if (v->strides[i] % itemsize)
      return fail(ZGATE_ERR_MISALIGNED, "%s has byte strides not multiples of its element size %lld",
                  name, (long long)itemsize), -1;
    v->strides[i] /= itemsize;
  }
  return 0;
}

static int too_many_dims(const char *name, int ndim) {
  if (ndim <= MAX_NDIM) return 0;
  fail(ZGATE_ERR_NDIM, "%s has %d dimensions; zgate takes at most %d", name, ndim, MAX_NDIM);
  return 1;
}

/* The DLPack dtype of a buffer format (struct module letters); opaque (refused by the
 * library) when unknown. */
static DLDataType buffer_dtype(const char *f, Py_ssize_t itemsize) {
  if (*f == '@' || *f == '=' || *f == '<') f++; /* native order: the hosts zgate builds for */
  int code = 3;
  if (f[0] == 'Z' && f[1] && !f[2]) code = kDLComplex;
  else if (f[0] && !f[1] && strchr("efd", f[0])) code = kDLFloat;
  else if (f[0] && !f[1] && strchr("bhilqn", f[0])) code = kDLInt;
  else if (f[0] && !f[1] && strchr("BHILQN", f[0])) code = kDLUInt;
  else if (f[0] == '?' && !f[1]) code = DL_BOOL;
  return (DLDataType){(uint8_t)code, (uint8_t)(itemsize * 8), 1};
}

/* The dtype that `alt` last turned into bfloat16 bits (native byte order, read through a
 * format): NumPy exports arrays of it without a format, which saves the refused request and
 * the Python call per array. */
static PyObject *bf16_dtype, *s_dtype;

static int view_buffer(View *v, Kind *k, PyObject *x, const char *name, int output) {
  int bf16 = 0;
  if (bf16_dtype) {
    PyObject *dt = PyObject_GetAttr(x, s_dtype);
    if (!dt) return -1;
    bf16 = dt == bf16_dtype;
    Py_DECREF(dt);
    if (bf16 && PyObject_GetBuffer(x, &v->buf, PyBUF_STRIDES)) { /* a NumPy that wants one */
      PyErr_Clear();
      bf16 = 0;
    }
  }
  if (!bf16 && PyObject_GetBuffer(x, &v->buf, PyBUF_RECORDS_RO)) {
    if (k->alt == Py_None || (!PyErr_ExceptionMatches(PyExc_BufferError) &&
                              !PyErr_ExceptionMatches(PyExc_ValueError)))
      return -1;
    PyErr_Clear();
    v->held = PyObject_CallOneArg(k->alt, x); /* uint16 bits of bfloat16, or None */
    if (!v->held) return -1;
    if (v->held == Py_None) {
      PyObject *dt = PyObject_GetAttr(x, s_dtype);
      if (dt) fail(ZGATE_ERR_DTYPE, "%s: dtype %S is not float32, float16 or bfloat16", name, dt);
      Py_XDECREF(dt);
      return -1;
    }
    if (PyObject_GetBuffer(v->held, &v->buf, PyBUF_RECORDS_RO)) return -1;
    bf16 = 2; /* read through its bits' format */
  }
  Py_buffer *b = &v->buf;
  if (output && b->readonly) return fail(-1, "%s is a read-only array", name), -1;
  if (b->format && (b->format[0] == '>' || b->format[0] == '!'))
    return fail(ZGATE_ERR_DTYPE, "%s has byte-swapped dtype (format '%s')", name, b->format), -1;
  if (bf16 == 2 && !bf16_dtype && !(bf16_dtype = PyObject_GetAttr(x, s_dtype))) PyErr_Clear();
  if (too_many_dims(name, b->ndim)) return -1;
  v->t.dtype = bf16 ? (DLDataType){kDLBfloat, 16, 1} : buffer_dtype(b->format, b->itemsize);
  v->t.data = b->buf;
  v->t.device.device_type = kDLCPU;
  for (int i = 0; i < b->ndim; i++) {
    v->shape[i] = b->shape[i];
    v->strides[i] = b->strides[i];
  }
  return set_layout(v, name, b->ndim, 1, b->itemsize);
}

static PyObject *s_dlpack, *s_dlpack_device, *kw_mv, *kw_mv_stream, *kw_stream, *max_version;
/* "__cuda_array_interface__"; its keys "shape", "typestr", "data" (required), "strides", "mask",
 * "stream" */
static PyObject *s_cai, *cai_keys[6];

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

static int view_dlpack(View *v, Kind *k, PyObject *x, const char *name, int output, Call *c) {
  PyObject *s = NULL;
  if (k->alt != Py_None) { /* the object to export instead */
    if (!(v->held = PyObject_CallOneArg(k->alt, x))) return -1;
    x = v->held;
  }
  PyObject *d = PyObject_CallMethodNoArgs(x, s_dlpack_device);
  if (!d) return -1;
  long dev = -1, id = 0;
  if (PyTuple_Check(d) && PyTuple_GET_SIZE(d) == 2) {
    dev = PyLong_AsLong(PyTuple_GET_ITEM(d, 0));
    id = PyLong_AsLong(PyTuple_GET_ITEM(d, 1));
  }
  Py_DECREF(d);
  if (PyErr_Occurred()) return -1;
  if (is_cuda_like((int)dev)) {
    if (!c->stream_known && kind_stream(k, (int)id, c)) return -1;
    /* DLPack's stream numbers: 1 is CUDA's legacy default stream */
    if (!(s = PyLong_FromVoidPtr(c->stream ? c->stream : (void *)1))) return -1;
  }
  PyObject *cap = capsule_of(x, s);
  Py_XDECREF(s);
  if (!cap) return -1;
  int r = take_capsule(v, cap, name, output);
  Py_DECREF(cap);
  return r;
}

static int view_exchange(View *v, Kind *k, PyObject *x, Call *c) {
  if (k->api->dltensor_from_py(x, &v->t)) return -1;
  if (!is_cuda_like((int)v->t.device.device_type) || c->stream_known) return 0;
  return kind_stream(k, v->t.device.device_id, c);
}

/* ---- the CUDA Array Interface ------------------------------------------------------------ */

/* A typestr ("<f4", "|b1"...) as a DLPack dtype; -1 where it names none: byte-swapped, or a
 * kind without a DLPack code ('V' raw bytes: bfloat16 has no typestr of its own). */
static int cai_dtype(PyObject *ts, DLDataType *d) {
  static const char kinds_[] = "iufcb", codes[] = {kDLInt, kDLUInt, kDLFloat, kDLComplex, DL_BOOL};
  const char *s = PyUnicode_Check(ts) ? PyUnicode_AsUTF8(ts) : NULL;
  if (!s) return PyErr_Clear(), -1;
  if (!strchr("<|=", s[0]) || !s[0] || !s[1] || !strchr(kinds_, s[1])) return -1;
  char *end;
  long bytes = strtol(s + 2, &end, 10);
  if (*end || end == s + 2 || bytes < 1 || bytes > 16) return -1;
  *d = (DLDataType){(uint8_t)codes[strchr(kinds_, s[1]) - kinds_], (uint8_t)(bytes * 8), 1};
  return 0;
}

/* The CUDA device of a data pointer: the CUDA driver's cuPointerGetAttribute (loaded from
 * libcuda.so.1 on first use), attribute CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL (9). */
static int cuda_device_of(void *p, const char *name, int *dev) {
  static int (*get)(void *, int, uintptr_t); /* CUresult; 0: CUDA_SUCCESS */
  void *lib = get ? NULL : dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib) *(void **)&get = dlsym(lib, "cuPointerGetAttribute");
  int e = get ? get(dev, 9, (uintptr_t)p) : -1;
  if (e == -1)
    return fail(-1, "%s: its __cuda_array_interface__ names data at %p, but no CUDA driver "
                "(libcuda.so.1) can be loaded", name, p), -1;
  if (e)
    return fail(-1, "%s: its __cuda_array_interface__ names data at %p, which the CUDA driver "
                "does not know (cuPointerGetAttribute: error %d)", name, p, e), -1;
  return 0;
}

/* x read through its __cuda_array_interface__ dict (v2, v3): shape, typestr, data (pointer,
 * read-only), strides (None: compact), stream (v3: 1 the legacy default stream, 2 the
 * per-thread default stream, else a cudaStream_t; None or absent: none), mask (refused). */
static int view_cai(View *v, Kind *k, PyObject *x, const char *name, int output, Call *c) {
  PyObject *d = PyObject_GetAttr(x, s_cai);
  if (!d) return -1;
  int r = -1, named = 0, ndim, readonly;
  void *stream = NULL;
  PyObject *f[6] = {NULL}; /* as cai_keys; the optional ones None where absent */
  for (int i = 0; i < 6 && PyDict_Check(d); i++)
    if (!(f[i] = PyDict_GetItemWithError(d, cai_keys[i]))) {
      if (PyErr_Occurred()) goto out;
      if (i >= 3) f[i] = Py_None;
    }
  PyObject *shape = f[0], *ts = f[1], *data = f[2], *strides = f[3], *mask = f[4], *st = f[5];
  if (!shape || !ts || !data || !PyTuple_Check(shape) || !PyTuple_Check(data) ||
      PyTuple_GET_SIZE(data) != 2 || (strides != Py_None && (!PyTuple_Check(strides) ||
                                      PyTuple_GET_SIZE(strides) != PyTuple_GET_SIZE(shape)))) {
    fail(-1, "%s: its __cuda_array_interface__ is not one: a dict with 'shape' (a tuple), "
         "'typestr', 'data' ((pointer, read_only)) and 'strides' (None or a tuple as long as "
         "'shape')", name);
    goto out;
  }
  if (mask != Py_None) {
    fail(-1, "%s is a masked array (its __cuda_array_interface__ has a 'mask'): zgate does not "
         "take masks", name);
    goto out;
  }
  if ((named = st != Py_None)) {
    stream = PyLong_Check(st) ? PyLong_AsVoidPtr(st) : NULL;
    if (!stream) {
      if (!PyErr_Occurred())
        fail(-1, "%s: its __cuda_array_interface__ names stream %R; the interface takes None, "
             "1, 2 or a stream's address (0 is not allowed)", name, st);
      goto out;
    }
    if (stream == (void *)1) stream = NULL; /* the legacy default stream, as zgate names it */
  }
  if ((named && c->stream_known && stream != c->stream) || cai_dtype(ts, &v->t.dtype)) {
    /* what the dict cannot give: the data ready on the call's stream, or a dtype's name */
    if (!PyObject_HasAttr(x, s_dlpack)) {
      if (named && c->stream_known && stream != c->stream)
        fail(-1, "%s: its __cuda_array_interface__ names CUDA stream %p, an earlier array %p "
             "(1: the legacy default stream); zgate runs a call on one stream", name,
             stream ? stream : (void *)1, c->stream ? c->stream : (void *)1);
      else
        fail(ZGATE_ERR_DTYPE, "%s: typestr %R is not one zgate reads ('<f4', '<f2'..., "
             "little-endian numbers; bfloat16 through __dlpack__)", name, ts);
      goto out;
    }
    if (named && !c->stream_known) *c = (Call){stream, 1, c->device};
    r = view_dlpack(v, k, x, name, output, c);
    goto out;
  }
  if ((readonly = PyObject_IsTrue(PyTuple_GET_ITEM(data, 1))) < 0) goto out;
  if (output && readonly) {
    fail(-1, "%s is a read-only array (its __cuda_array_interface__ says so)", name);
    goto out;
  }
  ndim = (int)PyTuple_GET_SIZE(shape);
  if (too_many_dims(name, ndim)) goto out;
  v->t.data = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data, 0));
  for (int i = 0; i < ndim; i++) {
    v->shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    if (strides != Py_None) v->strides[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
  }
  if (PyErr_Occurred() || set_layout(v, name, ndim, strides != Py_None, v->t.dtype.bits / 8)) goto out;
  /* an array without data (no elements) is taken to be on the call's device */
  v->t.device = (DLDevice){kDLCUDA, c->device < 0 ? 0 : c->device};
  if (v->t.data && cuda_device_of(v->t.data, name, &v->t.device.device_id)) goto out;
  if (named && !c->stream_known) *c = (Call){stream, 1, c->device};
  r = 0;
out:
  Py_DECREF(d);
  return r;
}

/* ---- reading an array ---------------------------------------------------------------------- */

/* x read as v->t. On an exception from the producer, a zgate.Error naming the array, the
 * producer's exception as its cause. */
static int view_of(View *v, PyObject *x, const char *name, int output, Call *c) {
  memset(v, 0, sizeof *v);
  Kind *k = kind_of(x);
  if (!k) return -1;
  if (output && !k->mutable_)
    return fail(-1, "%s is a %s, an immutable array: it cannot be written", name, type_name(x)), -1;
  int r;
  switch (k->mode) {
  case M_EXCHANGE: r = view_exchange(v, k, x, c); break;
  case M_BUFFER: r = view_buffer(v, k, x, name, output); break;
  case M_CAI: r = view_cai(v, k, x, name, output, c); break;
  case M_DLPACK: r = view_dlpack(v, k, x, name, output, c); break;
  default: return fail(-1, "%s is a %s; pass it with arrays of its own kind", name, type_name(x)), -1;
  }
  if (r && !PyErr_ExceptionMatches(Error)) { /* the producer's exception, as the cause */
    PyObject *t, *cause, *tb, *e;
    PyErr_Fetch(&t, &cause, &tb);
    PyErr_NormalizeException(&t, &cause, &tb);
    PyObject *why = cause ? PyObject_Str(cause) : NULL; /* its first line (C++ traces follow) */
    PyObject *lines = why ? PyUnicode_Splitlines(why, 0) : NULL;
    PyErr_Clear();
    fail(-1, "%s: could not read %s as an array: %S", name, type_name(x),
         lines && PyList_GET_SIZE(lines) ? PyList_GET_ITEM(lines, 0) : Py_None);
    Py_XDECREF(lines);
    Py_XDECREF(why);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    PyErr_Fetch(&t, &e, &tb);
    PyErr_NormalizeException(&t, &e, &tb);
    if (e) PyException_SetCause(e, cause); /* steals cause */
    else Py_XDECREF(cause);
    PyErr_Restore(t, e, tb);
  }
  if (r) release(v);
  else if (c->device < 0 && is_cuda_like((int)v->t.device.device_type)) c->device = v->t.device.device_id;
  return r;
}

/* ---- arguments --------------------------------------------------------------------------- */

static int threads_of(PyObject *n, int *out) {
  if (PyBool_Check(n) || !PyIndex_Check(n))
    return fail(ZGATE_ERR_OPTIONS, "options: num_threads is %R (%s); it takes a whole number: "
                "0 (the OpenMP default) or a thread count", n, type_name(n)), -1;
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(n, &overflow); /* through n.__index__ */
  if (v == -1 && PyErr_Occurred()) return -1;
  if (overflow || v < INT32_MIN || v > INT32_MAX)
    return fail(ZGATE_ERR_OPTIONS, "options: num_threads is %R, beyond a C int; it takes 0 "
                "(the OpenMP default) or a thread count", n), -1;
  *out = (int)v;
  return 0;
}

/* num_threads(n) -> n as a C int, refused as bwd and fwd refuse it (zgate._jax's check). */
static PyObject *py_num_threads(PyObject *self, PyObject *n) {
  (void)self;
  int v;
  return threads_of(n, &v) ? NULL : PyLong_FromLong(v);
}

/* True or False (a NumPy bool too); anything else is refused, not read as truthy. */
static int flag_of(PyObject *v, const char *name, int *out) {
  if (PyBool_Check(v)) return (*out = PyObject_IsTrue(v)) < 0 ? -1 : 0;
  const char *t = type_name(v);
  if (!strcmp(t, "numpy.bool") || !strcmp(t, "numpy.bool_"))
    return (*out = PyObject_IsTrue(v)) < 0 ? -1 : 0;
  return fail(-1, "%s is %R (%s); it takes True or False", name, v, t), -1;
}

/* Whether t's elements are laid out compact, row-major (size-1 dimensions' strides aside). */
static int compact(const DLTensor *t) {
  int64_t want = 1;
  for (int i = t->ndim - 1; t->strides && i >= 0; i--) {
    if (t->shape[i] == 0) return 1;
    if (t->shape[i] != 1 && t->strides[i] != want) return 0;
    want *= t->shape[i];
  }
  return 1;
}

/* A new output like x (read as *t): the kind's like = (fn, keywords): fn(x), or
 * fn(x, **keywords) for a strided x. */
static PyObject *new_like(Kind *k, PyObject *x, const DLTensor *t) {
  if (k->like == Py_None)
    return fail(-1, "cannot make outputs like a %s; pass them (dz=, dout_scaled=, out=)",
                type_name(x));
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

/* The kind's fallback(op, args...): its answer, or NULL with the exception set. */
static PyObject *to_fallback(Kind *k, const char *op, PyObject *const *a, Py_ssize_t n) {
  PyObject *args[8];
  if (!(args[0] = PyUnicode_FromString(op))) return NULL;
  for (Py_ssize_t i = 0; i < n; i++) args[i + 1] = a[i];
  PyObject *r = PyObject_Vectorcall(k->fallback, args, (size_t)n + 1, NULL);
  Py_DECREF(args[0]);
  return r;
}

/* ---- the calls ----------------------------------------------------------------------------- */

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

/* One call of op (zg_ops[op], its reference where ref): the inputs a[0..n_in) into the
 * outputs a[n_in..n_in+n_out) (None: new). inplace (bwd): dout is dout_scaled. n: the count
 * of a (the call's own, for a fallback). */
static PyObject *run(zg_op op, int ref, PyObject *const *a, Py_ssize_t n, int inplace, int threads) {
  const zg_op_desc *desc = &zg_ops[op];
  const int bwd = op == ZG_OP_BWD, nin = desc->n_in, nt = nin + desc->n_out;
  const char *const *names = desc->tensors;
  View v[ZG_MAX_TENSORS];
  PyObject *obj[ZG_MAX_TENSORS] = {NULL}; /* the arrays, outputs as new references */
  int given[ZG_MAX_TENSORS] = {0}, viewed = 0, st = ZGATE_OK;
  PyObject *result = NULL;
  Call c = {NULL, 0, -1};
  Kind *k0 = kind_of(a[0]);
  if (!k0) return NULL;
  if (k0->mode == M_FALLBACK && !ref) return to_fallback(k0, desc->name, a, n);
  for (int i = 0; i < nin; i++) obj[i] = a[i];
  for (; viewed < nin; viewed++) {
    int bad = view_of(&v[viewed], a[viewed], names[viewed], viewed == 0 && inplace, &c), d;
    if (viewed == 0 && !ref && k0->fallback != Py_None &&
        (bad || ((d = (int)v[0].t.device.device_type) != kDLCPU && d != kDLCUDA &&
                 d != kDLCUDAHost && d != kDLCUDAManaged))) {
      /* a device the producer cannot describe or the library does not serve (an NPU): the
       * fallback's turn; where it declines (NotImplemented), the call goes on to its error */
      PyObject *et, *ev, *tb;
      PyErr_Fetch(&et, &ev, &tb);
      result = to_fallback(k0, desc->name, a, n);
      if (result == Py_NotImplemented) {
        Py_CLEAR(result);
        PyErr_Restore(et, ev, tb);
      } else {
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        viewed = !bad;
        goto done;
      }
    }
    if (bad) goto done;
  }
  for (int i = nin; i < nt; i++) {
    if (inplace && i == 4) continue;
    if ((given[i] = a[i] != Py_None)) {
      obj[i] = Py_NewRef(a[i]);
    } else if (ref) {
      PyObject *shape = shape_of(&v[0].t);
      obj[i] = shape ? PyObject_CallOneArg(reference_like, shape) : NULL;
      Py_XDECREF(shape);
    } else {
      obj[i] = new_like(k0, a[0], &v[0].t);
    }
    if (!obj[i] || view_of(&v[i], obj[i], names[i], 1, &c)) goto done;
    viewed = i + 1;
  }
  zgate_options o = ZGATE_OPTIONS_INIT;
  o.num_threads = threads;
  o.cuda_stream = c.stream;
  DLTensor *t4 = inplace ? &v[0].t : &v[4].t;
  Py_BEGIN_ALLOW_THREADS
  if (bwd) st = ref ? zgate_bwd_reference(&v[0].t, &v[1].t, &v[2].t, &v[3].t, t4)
                    : zgate_bwd(&v[0].t, &v[1].t, &v[2].t, &v[3].t, t4, &o);
  else st = ref ? zgate_fwd_reference(&v[0].t, &v[1].t, &v[2].t) : zgate_fwd(&v[0].t, &v[1].t, &v[2].t, &o);
  Py_END_ALLOW_THREADS
  for (int i = 0; i < viewed; i++) release(&v[i]);
  viewed = 0;
  if (st != ZGATE_OK) {
    library_error(st, ref);
    goto done;
  }
  if (inplace && report_written(a[0])) goto done;
  for (int i = nin; i < nt; i++)
    if (given[i] && report_written(obj[i])) goto done;
  result = !bwd ? Py_NewRef(obj[2]) : PyTuple_Pack(2, obj[3], inplace ? a[0] : obj[4]);
done:
  for (int i = 0; i < viewed; i++) release(&v[i]);
  for (int i = nin; i < nt; i++) Py_XDECREF(obj[i]);
  return result;
}

static int nargs_is(const char *f, Py_ssize_t got, Py_ssize_t want) {
  if (got == want) return 1;
  PyErr_Format(PyExc_TypeError, "zgate._binding.%s takes %zd arguments (%zd given)", f, want, got);
  return 0;
}

/* bwd(dout, z, o, dz, dout_scaled, inplace, num_threads) -> (dz, dout_scaled) */
static PyObject *py_bwd(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  int threads, inplace;
  if (!nargs_is("bwd", n, 7) || threads_of(a[6], &threads) || flag_of(a[5], "inplace", &inplace))
    return NULL;
  if (inplace && a[4] != Py_None && a[4] != a[0])
    return fail(-1, "inplace=True writes dout_scaled into dout; do not pass dout_scaled as well");
  return run(ZG_OP_BWD, 0, a, n, inplace, threads);
}

/* fwd(o, z, out, num_threads) -> out */
static PyObject *py_fwd(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  int threads;
  if (!nargs_is("fwd", n, 4) || threads_of(a[3], &threads)) return NULL;
  return run(ZG_OP_FWD, 0, a, n, 0, threads);
}

/* reference_bwd(dout, z, o, dz, dout_scaled) -> (dz, dout_scaled); new outputs float64 NumPy */
static PyObject *py_reference_bwd(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  return nargs_is("reference_bwd", n, 5) ? run(ZG_OP_BWD, 1, a, n, a[4] == a[0], 0) : NULL;
}

static PyObject *py_reference_fwd(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  return nargs_is("reference_fwd", n, 3) ? run(ZG_OP_FWD, 1, a, n, 0, 0) : NULL;
}

/* check_tensor(quantity, got, ref, dout, z, o) -> dict: zgate_check_tensor's statistics of
 * got (CPU arrays; dout None for the forward's out), the request's figures among them
 * (max_scale_err, past_request). */
static PyObject *py_check_tensor(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  if (!nargs_is("check_tensor", n, 6)) return NULL;
  long q = PyLong_AsLong(a[0]);
  if (q == -1 && PyErr_Occurred()) return NULL;
  static const char *const names[] = {"got", "ref", "dout", "z", "o"};
  View v[5];
  Call c = {NULL, 0, -1};
  int viewed = 0, rc = -1, with_dout = a[3] != Py_None;
  for (; viewed < 5; viewed++)
    if ((viewed != 2 || with_dout) && view_of(&v[viewed], a[viewed + 1], names[viewed], 0, &c)) break;
  zgate_check_stats st;
  zgate_check_stats_init(&st);
  if (viewed == 5)
    rc = zgate_check_tensor((zgate_check_quantity)q, &v[0].t, &v[1].t, with_dout ? &v[2].t : NULL,
                            &v[3].t, &v[4].t, &st);
  for (int i = 0; i < viewed; i++)
    if (i != 2 || with_dout) release(&v[i]);
  if (viewed < 5) return NULL;
  if (rc) return fail(-1, "check_tensor: the tensors are unusable (host memory, equal shapes, "
                      "float32/float16/bfloat16/float64)");
  return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:d,s:d,s:d,s:d,s:d,s:L,s:d,s:L}", "count", (long long)st.count,
                       "failures", (long long)st.failures, "nan_mismatches", (long long)st.nan_mismatches,
                       "inf_mismatches", (long long)st.inf_mismatches, "first_fail",
                       (long long)st.first_fail, "first_got", st.first_got, "first_ref", st.first_ref,
                       "max_err_units", st.max_err_units, "max_bound_ratio", st.max_bound_ratio,
                       "max_rel_err", st.max_rel_err, "worst_index", (long long)st.worst_index,
                       "max_scale_err", st.max_scale_err, "past_request", (long long)st.past_request);
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

/* cuda_devices() -> (count, text): the CUDA devices seen, named, or why there are none. Apart
 * from info(): it initializes the CUDA driver, which info()'s other callers need not. */
static PyObject *py_cuda_devices(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  char text[1024];
  int n = zg_cuda_devices(text, sizeof text);
  return Py_BuildValue("(is)", n, text);
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
    {"cuda_devices", py_cuda_devices, METH_NOARGS, "cuda_devices() -> (count, names or why none)"},
    {"configure", FASTCALL(py_configure), "configure(classify, reference_like)"},
    {"address", py_address, METH_O, "address(obj) -> the address of obj's buffer"},
    {"num_threads", py_num_threads, METH_O, "num_threads(n) -> n, checked as bwd and fwd do"},
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
      !(s_dtype = PyUnicode_InternFromString("dtype")) ||
      !(s_dlpack_device = PyUnicode_InternFromString("__dlpack_device__")) ||
      !(kw_mv = Py_BuildValue("(s)", "max_version")) ||
      !(kw_mv_stream = Py_BuildValue("(ss)", "max_version", "stream")) ||
      !(kw_stream = Py_BuildValue("(s)", "stream")) || !(max_version = Py_BuildValue("(ii)", 1, 0)))
    return NULL;
  static const char *const keys[] = {"shape", "typestr", "data", "strides", "mask", "stream"};
  for (int i = 0; i < 6; i++)
    if (!(cai_keys[i] = PyUnicode_InternFromString(keys[i]))) return NULL;
  if (!(s_cai = PyUnicode_InternFromString("__cuda_array_interface__"))) return NULL;
  return PyModule_Create(&module);
}
