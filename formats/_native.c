/*
 * formats._native: the hot loops over Kafka record batches, compiled.
 *
 * Public API (the Python side, formats/records.py and formats/segment.py, is written against it):
 *
 *   crc32c(data, value=0) -> int
 *       CRC-32C (Castagnoli) of a bytes-like object, continuing from `value` (a previous result).
 *   scan(buf, position, end, check_crc) -> (batches, stop, reason)
 *       Walk the units of a .log region by the common 17-byte framing; one 15-tuple per complete
 *       magic-2 batch; stop at the end, at a legacy (v0/v1) unit, at a bad size or a bad magic.
 *   decode_records(data, count, base_offset, base_timestamp, log_append_time) -> list[Record]
 *       Decode the records region of one (decompressed) v2 batch, validating as Kafka does.
 *   json_records(data, count, base_offset, base_timestamp, log_append_time, base_sequence, key_mode,
 *                value_mode) -> bytes
 *       The same records as the JSON lines of `kcli dump-segment --output json`, with decode_records'
 *       errors; keys and values as text: 0 UTF-8 with replacement, 1 hex, 2 base64.
 *   encode_records(records, base_timestamp) -> (data, last_offset_delta, max_timestamp)
 *       The records region of a v2 batch from Records or RecordSpec-shaped tuples (what build_batch
 *       compresses or appends after the batch header).
 *   murmur2(data) -> int
 *       Kafka's Utils.murmur2 (the Java producer's key hash), as a signed 32-bit int.
 *   Record(offset, timestamp, key, value, headers)
 *       Tuple subclass with attribute access, like a named tuple.
 *
 * Only Python's C API and the C standard library are used. On x86-64 with GCC or Clang the CRC uses
 * the SSE4.2 crc32 and PCLMULQDQ instructions when the CPU has both (checked at import; every x86-64
 * CPU since 2010 does); everywhere else, or with -DKCLI_PORTABLE_ONLY, a portable slicing-by-8 table
 * does the work.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(KCLI_PORTABLE_ONLY)
#define KCLI_X86_CRC 1
#include <nmmintrin.h>
#include <wmmintrin.h>
#endif

/* ---------------------------------------------------------------------------------------------------
 * Byte access. Kafka integers are big-endian; the CRC reads 64-bit words in little-endian order.
 * memcpy keeps unaligned loads legal; compilers turn it into one load.
 */

static inline uint64_t load_le64(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#else
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
#endif
}

static inline uint16_t load_be16(const uint8_t *p) { return (uint16_t)((unsigned)p[0] << 8 | p[1]); }

static inline uint32_t load_be32(const uint8_t *p)
{
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t v;
    memcpy(&v, p, 4);
    return __builtin_bswap32(v);
#else
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
#endif
}

static inline uint64_t load_be64(const uint8_t *p)
{
    return (uint64_t)load_be32(p) << 32 | load_be32(p + 4);
}

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)0)
#endif

/* Two's-complement reinterpretation without implementation-defined conversions. */
static inline int16_t as_i16(uint16_t v) { return v < 0x8000u ? (int16_t)v : (int16_t)(-(int32_t)(0xFFFFu - v) - 1); }
static inline int32_t as_i32(uint32_t v) { return v < 0x80000000u ? (int32_t)v : (int32_t)(-(int64_t)(0xFFFFFFFFu - v) - 1); }
static inline int64_t as_i64(uint64_t v)
{
    return v < 0x8000000000000000u ? (int64_t)v : -(int64_t)(0xFFFFFFFFFFFFFFFFu - v) - 1;
}

/* ---------------------------------------------------------------------------------------------------
 * CRC-32C (Castagnoli), reflected polynomial 0x82F63B78.
 *
 * Internal functions work on the raw register (no pre/post inversion); crc32c(data, value) is
 * ~update(~value, data). The register update is linear over GF(2), so
 *     crc(A || B) = shift(crc(A), len(B)) ^ crc_from_zero(B)
 * where shift(c, L) feeds L zero bytes, i.e. multiplies c by x^(8L) modulo the polynomial.
 *
 * The hardware path splits a buffer into three equal streams and runs three independent crc32
 * chains over them (hiding the instruction's 3-cycle latency), then merges them with two shifts.
 * A shift is one carry-less multiplication by a precomputed constant followed by one crc32 of the
 * 64-bit product: with the reflected bit order, crc32_u64(0, clmul(c, x^(8L-33) mod P)) equals
 * c * x^(8L) mod P. Constants exist for every stream length that is a multiple of 8 up to
 * CRC_MAX_STREAM, so a 16 KiB batch is one three-way block and a short tail.
 */

#define CRC32C_POLY 0x82F63B78u
#define CRC_MAX_STREAM 32768  /* bytes per stream in one three-way block (longer streams read memory faster) */
#define CRC_MIN_THREE_WAY 192 /* below this a single chain is as fast */

static uint32_t crc_slice[8][256];                       /* [k][b]: byte b followed by k zero bytes */
static uint32_t crc_shift_const[CRC_MAX_STREAM / 8 + 1]; /* [L/8]: x^(8L-33) mod P, reflected */

static uint32_t (*crc_update)(uint32_t crc, const uint8_t *p, size_t n);

static uint32_t crc_update_portable(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_slice[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w = load_le64(p) ^ crc;
        crc = crc_slice[7][w & 0xFF] ^ crc_slice[6][(w >> 8) & 0xFF] ^ crc_slice[5][(w >> 16) & 0xFF] ^
              crc_slice[4][(w >> 24) & 0xFF] ^ crc_slice[3][(w >> 32) & 0xFF] ^
              crc_slice[2][(w >> 40) & 0xFF] ^ crc_slice[1][(w >> 48) & 0xFF] ^ crc_slice[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc_slice[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#ifdef KCLI_X86_CRC
#define CRC_HW __attribute__((target("sse4.2,pclmul")))

CRC_HW static inline uint64_t crc_shift_hw(uint64_t crc, uint32_t constant)
{
    __m128i product = _mm_clmulepi64_si128(_mm_cvtsi64_si128((long long)crc),
                                           _mm_cvtsi64_si128((long long)constant), 0x00);
    return _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(product));
}

/* Three independent CRC chains over `len` bytes (a multiple of 8) at a, b and c, in lock-step so the
 * three crc32 instructions in flight hide each other's latency. */
CRC_HW static inline void crc_streams3_hw(uint64_t *c0, uint64_t *c1, uint64_t *c2, const uint8_t *a,
                                          const uint8_t *b, const uint8_t *c, size_t len)
{
    uint64_t x = *c0, y = *c1, z = *c2;
    size_t i = 0;
    for (; i + 32 <= len; i += 32)
        for (size_t j = i; j < i + 32; j += 8) {
            x = _mm_crc32_u64(x, load_le64(a + j));
            y = _mm_crc32_u64(y, load_le64(b + j));
            z = _mm_crc32_u64(z, load_le64(c + j));
        }
    for (; i < len; i += 8) {
        x = _mm_crc32_u64(x, load_le64(a + i));
        y = _mm_crc32_u64(y, load_le64(b + i));
        z = _mm_crc32_u64(z, load_le64(c + i));
    }
    *c0 = x, *c1 = y, *c2 = z;
}

/* One three-way block: streams of `len` bytes (a multiple of 8) at p, p + len, p + 2 len. */
CRC_HW static inline uint64_t crc_three_way_hw(uint64_t c0, const uint8_t *p, size_t len)
{
    uint64_t c1 = 0, c2 = 0;
    crc_streams3_hw(&c0, &c1, &c2, p, p + len, p + 2 * len, len);
    const uint32_t k = crc_shift_const[len / 8];
    c0 = crc_shift_hw(c0, k) ^ c1;
    return crc_shift_hw(c0, k) ^ c2;
}

CRC_HW static uint32_t crc_update_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = crc;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    while (n >= 3 * CRC_MAX_STREAM) {
        c = crc_three_way_hw(c, p, CRC_MAX_STREAM);
        p += 3 * CRC_MAX_STREAM;
        n -= 3 * CRC_MAX_STREAM;
    }
    if (n >= CRC_MIN_THREE_WAY) {
        size_t len = n / 24 * 8;
        c = crc_three_way_hw(c, p, len);
        p += 3 * len;
        n -= 3 * len;
    }
    while (n >= 8) {
        c = _mm_crc32_u64(c, load_le64(p));
        p += 8;
        n -= 8;
    }
    while (n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif

#ifdef KCLI_X86_CRC
/* Three independent CRCs (three batches) in lock-step: three long sequential streams and no
 * merging, which streams from memory faster than splitting each batch three ways. */
CRC_HW static void crc_update3_hw(uint32_t crc[3], const uint8_t *const p[3], const size_t n[3])
{
    const uint8_t *a = p[0], *b = p[1], *c = p[2];
    size_t common = n[0] < n[1] ? n[0] : n[1];
    common = (common < n[2] ? common : n[2]) / 8 * 8;
    uint64_t c0 = crc[0], c1 = crc[1], c2 = crc[2];
    crc_streams3_hw(&c0, &c1, &c2, a, b, c, common);
    crc[0] = crc_update_hw((uint32_t)c0, a + common, n[0] - common);
    crc[1] = crc_update_hw((uint32_t)c1, b + common, n[1] - common);
    crc[2] = crc_update_hw((uint32_t)c2, c + common, n[2] - common);
}
#endif

static void crc_update3_portable(uint32_t crc[3], const uint8_t *const p[3], const size_t n[3])
{
    for (int k = 0; k < 3; k++)
        crc[k] = crc_update_portable(crc[k], p[k], n[k]);
}

static void (*crc_update3)(uint32_t crc[3], const uint8_t *const p[3], const size_t n[3]);

/* Multiply a reflected register by x^bits modulo the polynomial (feed `bits` zero bits). */
static uint32_t crc_times_x(uint32_t v, unsigned bits)
{
    while (bits--)
        v = (v & 1) ? (v >> 1) ^ CRC32C_POLY : v >> 1;
    return v;
}

static void crc_init(void)
{
    for (uint32_t b = 0; b < 256; b++)
        crc_slice[0][b] = crc_times_x(b, 8);
    for (uint32_t b = 0; b < 256; b++)
        for (int k = 1; k < 8; k++)
            crc_slice[k][b] = (crc_slice[k - 1][b] >> 8) ^ crc_slice[0][crc_slice[k - 1][b] & 0xFF];

    /* x^(8L-33) for L = 8, 16, ...: start from x^31 (1 is 0x80000000 reflected), step by x^64. */
    uint32_t k = crc_times_x(0x80000000u, 8 * 8 - 33);
    crc_shift_const[0] = 0;
    for (size_t i = 1; i <= CRC_MAX_STREAM / 8; i++) {
        crc_shift_const[i] = k;
        k = crc_times_x(k, 64);
    }

    crc_update = crc_update_portable;
    crc_update3 = crc_update3_portable;
#ifdef KCLI_X86_CRC
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul")) {
        crc_update = crc_update_hw;
        crc_update3 = crc_update3_hw;
    }
#endif
}

static inline uint32_t crc32c_of(uint32_t value, const uint8_t *p, size_t n)
{
    return ~crc_update(~value, p, n);
}

/* ---------------------------------------------------------------------------------------------------
 * Argument helpers (vectorcall: no tuple is built per call).
 */

static PyObject *CorruptRecordError; /* formats.errors.CorruptRecordError */

static int arg_int64(PyObject *obj, const char *name, int64_t *out)
{
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", name, Py_TYPE(obj)->tp_name);
        }
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

static int arg_count(Py_ssize_t nargs, Py_ssize_t lo, Py_ssize_t hi, const char *fname)
{
    if (nargs < lo || nargs > hi) {
        if (lo == hi)
            PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments (%zd given)", fname, lo, nargs);
        else
            PyErr_Format(PyExc_TypeError, "%s() takes from %zd to %zd arguments (%zd given)", fname, lo, hi,
                         nargs);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------------
 * crc32c(data, value=0)
 */

#define CRC_RELEASE_GIL_BYTES (64 * 1024)

PyDoc_STRVAR(crc32c_doc, "crc32c($module, data, /, value=0)\n--\n\n"
                         "CRC-32C (Castagnoli) of data, continuing from value (a previous result).");

static PyObject *native_crc32c(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)module;
    PyObject *data = NULL, *value_obj = NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (arg_count(nargs + nkw, 1, 2, "crc32c") < 0)
        return NULL;
    data = nargs > 0 ? args[0] : NULL;
    if (nargs > 1)
        value_obj = args[1];
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(key, "value") == 0 && value_obj == NULL) {
            value_obj = args[nargs + i];
        } else {
            PyErr_Format(PyExc_TypeError, "crc32c() got an unexpected keyword argument '%U'", key);
            return NULL;
        }
    }
    if (data == NULL) {
        PyErr_SetString(PyExc_TypeError, "crc32c() missing required argument 'data' (pos 1)");
        return NULL;
    }
    uint32_t value = 0;
    if (value_obj != NULL) {
        unsigned long long v = PyLong_AsUnsignedLongLong(value_obj);
        if (v == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
        if (v > 0xFFFFFFFFull) {
            PyErr_SetString(PyExc_OverflowError, "crc32c() value must fit in 32 bits");
            return NULL;
        }
        value = (uint32_t)v;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc;
    if (view.len >= CRC_RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS crc = crc32c_of(value, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32c_of(value, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

PyDoc_STRVAR(crc32c_portable_doc, "_crc32c_portable($module, data, value=0, /)\n--\n\n"
                                  "crc32c() through the table-driven path, so tests cover it on any CPU.");

static PyObject *native_crc32c_portable(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (arg_count(nargs, 1, 2, "_crc32c_portable") < 0)
        return NULL;
    int64_t value = 0;
    if (nargs > 1 && arg_int64(args[1], "value", &value) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc = ~crc_update_portable(~(uint32_t)value, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* ---------------------------------------------------------------------------------------------------
 * scan(buf, position, end, check_crc)
 *
 * Framing (Kafka's FileLogInputStream.nextBatch): a unit needs more than 17 bytes before `end`; its
 * size field (bytes after offset+size) must be >= 14; it must fit before `end`; byte 16 is the magic.
 * The walk runs in chunks: the CRC pass over a chunk runs without the GIL, then the chunk's header
 * tuples are built with it. CRCs are computed three batches at a time, one chain per batch, which
 * reads a memory-mapped file faster than splitting every batch three ways (the streams are longer).
 */

enum { SCAN_END = 0, SCAN_LEGACY = 1, SCAN_BAD_SIZE = 2, SCAN_BAD_MAGIC = 3, SCAN_MORE = -1 };

#define LOG_OVERHEAD 12
#define HEADER_SIZE_UP_TO_MAGIC 17
#define MIN_UNIT_SIZE 14         /* v0 message overhead */
#define RECORD_BATCH_OVERHEAD 61 /* v2 batch header */
#define CRC_START 21             /* CRC covers [attributes, end of batch) */
#define SCAN_CHUNK 64            /* batches per CRC pass (three at a time inside it) */

typedef struct {
    Py_ssize_t position;
    int crc_valid;                          /* 1, 0, or -1 when not checked */
    uint8_t header[RECORD_BATCH_OVERHEAD]; /* copied while hot, so building tuples touches no file pages */
} scan_entry;

/* Check the CRCs of entries [first, last): in threes, then one by one. */
static void scan_check_crcs(const uint8_t *buf, scan_entry *entries, Py_ssize_t first, Py_ssize_t last)
{
    for (; first + 3 <= last; first += 3) {
        uint32_t crc[3] = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu};
        const uint8_t *p[3];
        size_t n[3];
        for (int k = 0; k < 3; k++) {
            const scan_entry *e = &entries[first + k];
            p[k] = buf + e->position + CRC_START;
            n[k] = (size_t)as_i32(load_be32(e->header + 8)) + LOG_OVERHEAD - CRC_START;
        }
        crc_update3(crc, p, n);
        for (int k = 0; k < 3; k++)
            entries[first + k].crc_valid = ~crc[k] == load_be32(entries[first + k].header + 17);
    }
    for (; first < last; first++) {
        scan_entry *e = &entries[first];
        size_t n = (size_t)as_i32(load_be32(e->header + 8)) + LOG_OVERHEAD - CRC_START;
        e->crc_valid = crc32c_of(0, buf + e->position + CRC_START, n) == load_be32(e->header + 17);
    }
}

/* Walk from *position; fill at most SCAN_CHUNK entries. Returns a stop reason or SCAN_MORE. */
static int scan_chunk(const uint8_t *buf, Py_ssize_t *position, Py_ssize_t end, int check_crc,
                      scan_entry *out, Py_ssize_t *n_out)
{
    Py_ssize_t pos = *position, n = 0, checked = 0;
    int reason = SCAN_MORE;
    while (n < SCAN_CHUNK) {
        if (end - pos <= HEADER_SIZE_UP_TO_MAGIC) {
            reason = SCAN_END;
            break;
        }
        const uint8_t *unit = buf + pos;
        int32_t size = as_i32(load_be32(unit + 8));
        if (size < MIN_UNIT_SIZE) {
            reason = SCAN_BAD_SIZE;
            break;
        }
        if (size > end - pos - LOG_OVERHEAD) {
            reason = SCAN_END;
            break;
        }
        uint8_t magic = unit[16];
        if (magic == 0 || magic == 1) {
            reason = SCAN_LEGACY;
            break;
        }
        if (magic != 2) {
            reason = SCAN_BAD_MAGIC;
            break;
        }
        if (size < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD) {
            reason = SCAN_BAD_SIZE;
            break;
        }
        out[n].position = pos;
        out[n].crc_valid = -1;
        memcpy(out[n].header, unit, RECORD_BATCH_OVERHEAD);
        n++;
        pos += LOG_OVERHEAD + size;
        if (!check_crc) {
            /* Only headers are read: keep several guessed header fetches in flight. */
            Py_ssize_t stride = LOG_OVERHEAD + size;
            if (stride <= (end - pos) / 8)
                PREFETCH(buf + pos + 8 * stride);
        } else if (n - checked == 3) {
            /* Batches often share a size: fetch the guessed headers after the next one early. */
            Py_ssize_t stride = LOG_OVERHEAD + size;
            if (stride <= (end - pos) / 3) {
                PREFETCH(buf + pos + stride);
                PREFETCH(buf + pos + 2 * stride);
            }
            scan_check_crcs(buf, out, checked, n);
            checked = n;
        }
    }
    if (check_crc)
        scan_check_crcs(buf, out, checked, n);
    *position = pos;
    *n_out = n;
    return reason;
}

static inline int tuple_put(PyObject *t, Py_ssize_t i, PyObject *v)
{
    if (v == NULL)
        return -1;
    PyTuple_SET_ITEM(t, i, v);
    return 0;
}

/* The 15-tuple of one batch. It holds only ints, bools and None, so it cannot be part of a reference
 * cycle: it is untracked by the GC (CPython does the same to such tuples, but only lazily). */
static PyObject *batch_tuple(const scan_entry *e, PyTypeObject *type)
{
    const uint8_t *h = e->header;
    /* A tuple subclass without instance slots (a namedtuple) is laid out as a tuple: allocate it
     * directly, saving the Python-level wrap per batch. */
    PyObject *t = type == NULL ? PyTuple_New(15) : type->tp_alloc(type, 15);
    if (t == NULL)
        return NULL;
    PyObject *crc_valid = e->crc_valid < 0 ? Py_None : e->crc_valid ? Py_True : Py_False;
    Py_INCREF(crc_valid);
    PyTuple_SET_ITEM(t, 14, crc_valid);
    if (tuple_put(t, 0, PyLong_FromSsize_t(e->position)) < 0 ||
        tuple_put(t, 1, PyLong_FromLongLong(as_i64(load_be64(h)))) < 0 ||
        tuple_put(t, 2, PyLong_FromLong(as_i32(load_be32(h + 8)))) < 0 ||
        tuple_put(t, 3, PyLong_FromLong(as_i32(load_be32(h + 12)))) < 0 ||
        tuple_put(t, 4, PyLong_FromLong(2)) < 0 ||
        tuple_put(t, 5, PyLong_FromUnsignedLong(load_be32(h + 17))) < 0 ||
        tuple_put(t, 6, PyLong_FromLong(as_i16(load_be16(h + 21)))) < 0 ||
        tuple_put(t, 7, PyLong_FromLong(as_i32(load_be32(h + 23)))) < 0 ||
        tuple_put(t, 8, PyLong_FromLongLong(as_i64(load_be64(h + 27)))) < 0 ||
        tuple_put(t, 9, PyLong_FromLongLong(as_i64(load_be64(h + 35)))) < 0 ||
        tuple_put(t, 10, PyLong_FromLongLong(as_i64(load_be64(h + 43)))) < 0 ||
        tuple_put(t, 11, PyLong_FromLong(as_i16(load_be16(h + 51)))) < 0 ||
        tuple_put(t, 12, PyLong_FromLong(as_i32(load_be32(h + 53)))) < 0 ||
        tuple_put(t, 13, PyLong_FromLong(as_i32(load_be32(h + 57)))) < 0) {
        Py_DECREF(t); /* unset slots are NULL, which tuple dealloc skips */
        return NULL;
    }
    PyObject_GC_UnTrack(t);
    return t;
}

PyDoc_STRVAR(scan_doc,
             "scan($module, buf, position, end, check_crc, batch_type=None, /)\n--\n\n"
             "Walk the units of buf[position:end]; return (batches, stop, reason).\n\n"
             "batch_type, if given, is a tuple subclass without instance slots (a namedtuple of 15\n"
             "fields) whose instances hold the batches instead of plain tuples.\n\n"
             "batches holds one 15-tuple per complete magic-2 batch, in header order:\n"
             "(position, base_offset, batch_length, partition_leader_epoch, magic, crc, attributes,\n"
             " last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,\n"
             " base_sequence, records_count, crc_valid). reason: 0 end (or an incomplete unit at stop),\n"
             "1 legacy v0/v1 unit at stop, 2 bad size at stop, 3 bad magic at stop.");

static PyObject *native_scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (arg_count(nargs, 4, 5, "scan") < 0)
        return NULL;
    PyTypeObject *batch_type = NULL;
    if (nargs == 5 && args[4] != Py_None) {
        if (!PyType_Check(args[4]) || !PyType_IsSubtype((PyTypeObject *)args[4], &PyTuple_Type) ||
            ((PyTypeObject *)args[4])->tp_basicsize != PyTuple_Type.tp_basicsize) {
            PyErr_SetString(PyExc_TypeError, "scan() batch_type must be a tuple subclass without slots");
            return NULL;
        }
        batch_type = (PyTypeObject *)args[4];
    }
    int64_t position, end;
    if (arg_int64(args[1], "position", &position) < 0 || arg_int64(args[2], "end", &end) < 0)
        return NULL;
    int check_crc = PyObject_IsTrue(args[3]);
    if (check_crc < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (position < 0 || end < position || end > (int64_t)view.len) {
        PyErr_Format(PyExc_ValueError, "scan() needs 0 <= position <= end <= len(buf), got %lld, %lld, %zd",
                     (long long)position, (long long)end, view.len);
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *batches = PyList_New(0);
    if (batches == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const uint8_t *buf = view.buf;
    Py_ssize_t pos = (Py_ssize_t)position;
    /* Walk and checksum the whole region first, without the GIL when it is big enough to matter, so
     * another thread's Python work runs meanwhile; then build the batch objects in one go. Waking up
     * for the GIL between chunks would cost up to the interpreter's switch interval each time. */
    Py_ssize_t count = 0, capacity = SCAN_CHUNK;
    scan_entry *entries = PyMem_RawMalloc(capacity * sizeof(scan_entry));
    if (entries == NULL) {
        Py_DECREF(batches);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    int reason, out_of_memory = 0;
    int release = check_crc && end - pos >= CRC_RELEASE_GIL_BYTES;
    PyThreadState *thread = release ? PyEval_SaveThread() : NULL;
    do {
        if (capacity - count < SCAN_CHUNK) {
            scan_entry *grown = PyMem_RawRealloc(entries, 2 * capacity * sizeof(scan_entry));
            if (grown == NULL) {
                out_of_memory = 1;
                break;
            }
            entries = grown;
            capacity *= 2;
        }
        Py_ssize_t n;
        reason = scan_chunk(buf, &pos, (Py_ssize_t)end, check_crc, entries + count, &n);
        count += n;
    } while (reason == SCAN_MORE);
    if (thread != NULL)
        PyEval_RestoreThread(thread);
    if (out_of_memory) {
        PyMem_RawFree(entries);
        Py_DECREF(batches);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *t = batch_tuple(&entries[i], batch_type);
        if (t == NULL || PyList_Append(batches, t) < 0) {
            Py_XDECREF(t);
            PyMem_RawFree(entries);
            Py_DECREF(batches);
            PyBuffer_Release(&view);
            return NULL;
        }
        Py_DECREF(t);
    }
    PyMem_RawFree(entries);
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nni)", batches, pos, reason);
}

/* ---------------------------------------------------------------------------------------------------
 * decode_records(data, count, base_offset, base_timestamp, log_append_time)
 *
 * Mirrors Kafka's DefaultRecord.readFrom over the uncompressed batch buffer: every field is read
 * against the end of `data` (not of the record), then the bytes consumed must equal the record's
 * declared length. Messages are Kafka's.
 */

/* Record: a tuple subclass of exactly five items with one slot member per field. Slot members
 * (T_OBJECT_EX at fixed offsets into the tuple's items) are what CPython's attribute-access
 * specialisation handles fastest; a PyStructSequence's members are not, and creating one costs two
 * type-dict lookups. Records built here hold only ints, bytes, str and tuples of those, so they
 * cannot be part of a cycle and are left untracked by the GC, as CPython does for such tuples. */

#define RECORD_FIELDS 5
#define RECORD_ITEM_OFFSET(i) ((Py_ssize_t)(offsetof(PyTupleObject, ob_item) + (i) * sizeof(PyObject *)))

static PyTypeObject RecordType;

static PyObject *record_alloc(PyObject *offset, PyObject *timestamp, PyObject *key, PyObject *value,
                              PyObject *headers)
{
    PyTupleObject *r = PyObject_GC_NewVar(PyTupleObject, &RecordType, RECORD_FIELDS);
    if (r == NULL)
        return NULL;
    r->ob_item[0] = offset;
    r->ob_item[1] = timestamp;
    r->ob_item[2] = key;
    r->ob_item[3] = value;
    r->ob_item[4] = headers;
    return (PyObject *)r;
}

static PyObject *record_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"offset", "timestamp", "key", "value", "headers", NULL};
    PyObject *items[RECORD_FIELDS];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO:Record", names, &items[0], &items[1], &items[2],
                                     &items[3], &items[4]))
        return NULL;
    PyTupleObject *r = (PyTupleObject *)type->tp_alloc(type, RECORD_FIELDS); /* GC-tracked: any items */
    if (r == NULL)
        return NULL;
    for (int i = 0; i < RECORD_FIELDS; i++) {
        Py_INCREF(items[i]);
        r->ob_item[i] = items[i];
    }
    return (PyObject *)r;
}

static void record_dealloc(PyObject *self)
{
    PyTupleObject *r = (PyTupleObject *)self;
    PyObject_GC_UnTrack(self);
    for (Py_ssize_t i = 0; i < Py_SIZE(self); i++)
        Py_XDECREF(r->ob_item[i]);
    PyObject_GC_Del(self);
}

static PyObject *record_repr(PyObject *self)
{
    PyObject *const *f = ((PyTupleObject *)self)->ob_item;
    return PyUnicode_FromFormat("Record(offset=%R, timestamp=%R, key=%R, value=%R, headers=%R)", f[0], f[1],
                                f[2], f[3], f[4]);
}

static PyObject *record_reduce(PyObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *const *f = ((PyTupleObject *)self)->ob_item;
    return Py_BuildValue("(O(OOOOO))", (PyObject *)Py_TYPE(self), f[0], f[1], f[2], f[3], f[4]);
}

static PyMemberDef record_members[] = {
    {"offset", T_OBJECT_EX, RECORD_ITEM_OFFSET(0), READONLY, "base_offset + offsetDelta"},
    {"timestamp", T_OBJECT_EX, RECORD_ITEM_OFFSET(1), READONLY,
     "base_timestamp + timestampDelta, or the batch's log-append time"},
    {"key", T_OBJECT_EX, RECORD_ITEM_OFFSET(2), READONLY, "bytes, or None for a null key"},
    {"value", T_OBJECT_EX, RECORD_ITEM_OFFSET(3), READONLY, "bytes, or None for a null value (a tombstone)"},
    {"headers", T_OBJECT_EX, RECORD_ITEM_OFFSET(4), READONLY, "tuple of (key: str, value: bytes | None) pairs"},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef record_methods[] = {
    {"__reduce__", record_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RecordType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "formats._native.Record",
    .tp_doc = PyDoc_STR("Record(offset, timestamp, key, value, headers)\n--\n\n"
                        "A v2 record; a tuple of those five fields with attribute access."),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = record_new,
    .tp_dealloc = record_dealloc,
    .tp_repr = record_repr,
    .tp_members = record_members,
    .tp_methods = record_methods,
};

/* Called once at import: tuple is the base, plus the namedtuple-style class attributes. */
static int record_type_ready(void)
{
    RecordType.tp_base = &PyTuple_Type;
    RecordType.tp_traverse = PyTuple_Type.tp_traverse;
    if (PyType_Ready(&RecordType) < 0)
        return -1;
    PyObject *fields = Py_BuildValue("(sssss)", "offset", "timestamp", "key", "value", "headers");
    if (fields == NULL)
        return -1;
    int rc = PyDict_SetItemString(RecordType.tp_dict, "_fields", fields);
    if (rc == 0)
        rc = PyDict_SetItemString(RecordType.tp_dict, "__match_args__", fields);
    Py_DECREF(fields);
    PyType_Modified(&RecordType);
    return rc;
}

enum { VARINT_OK = 0, VARINT_EOF = 1, VARINT_TOO_LONG = 2 };

/* Kafka's ByteUtils.readUnsignedVarint: at most 5 bytes; the 5th byte's high bits beyond 32 are
 * dropped, and a continuation bit on the 5th byte is an error. *out holds the value read so far. */
static inline int read_uvarint(const uint8_t **pp, const uint8_t *end, uint32_t *out)
{
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) {
        *out = *p;
        *pp = p + 1;
        return VARINT_OK;
    }
    uint32_t result = 0;
    for (int shift = 0; shift < 28; shift += 7) {
        if (p >= end)
            return VARINT_EOF;
        uint8_t b = *p++;
        result |= (uint32_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = result;
            *pp = p;
            return VARINT_OK;
        }
    }
    if (p >= end)
        return VARINT_EOF;
    uint8_t b = *p++;
    result |= (uint32_t)b << 28;
    *out = result;
    if (b >= 0x80)
        return VARINT_TOO_LONG;
    *pp = p;
    return VARINT_OK;
}

/* Kafka's ByteUtils.readUnsignedVarlong: at most 10 bytes. */
static inline int read_uvarlong(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) {
        *out = *p;
        *pp = p + 1;
        return VARINT_OK;
    }
    uint64_t value = 0;
    for (int shift = 0;; shift += 7) {
        if (p >= end)
            return VARINT_EOF;
        uint8_t b = *p++;
        if (b < 0x80) {
            value |= (uint64_t)b << shift;
            break;
        }
        value |= (uint64_t)(b & 0x7F) << shift;
        if (shift + 7 > 63) {
            *out = value;
            return VARINT_TOO_LONG;
        }
    }
    *out = value;
    *pp = p;
    return VARINT_OK;
}

static inline int32_t unzigzag32(uint32_t u) { return as_i32((u >> 1) ^ (0u - (u & 1))); }
static inline int64_t unzigzag64(uint64_t u) { return as_i64((u >> 1) ^ (0u - (u & 1))); }

static void raise_corrupt(const char *message)
{
    PyErr_SetString(CorruptRecordError, message);
}

static void raise_varint(int status, uint32_t value)
{
    if (status == VARINT_TOO_LONG) {
        PyErr_Format(CorruptRecordError,
                     "Varint is too long, the most significant bit in the 5th byte is set, converted value: %x",
                     (unsigned int)value);
    } else {
        raise_corrupt("Found invalid record structure");
    }
}

static void raise_varlong(int status, uint64_t value)
{
    if (status == VARINT_TOO_LONG) {
        char hex[17];
        snprintf(hex, sizeof hex, "%llx", (unsigned long long)value);
        PyErr_Format(CorruptRecordError,
                     "Varlong is too long, most significant bit in the 10th byte is set, converted value: %s", hex);
    } else {
        raise_corrupt("Found invalid record structure");
    }
}

/* Read a varint inside a record body; on error raise and return -1. */
static inline int body_varint(const uint8_t **pp, const uint8_t *end, int32_t *out)
{
    uint32_t u;
    int status = read_uvarint(pp, end, &u);
    if (status != VARINT_OK) {
        raise_varint(status, u);
        return -1;
    }
    *out = unzigzag32(u);
    return 0;
}

/* ---------------------------------------------------------------------------------------------------
 * The record parser shared by decode_records and json_records: it validates one record and yields
 * its fields as spans into `data`; each caller then renders the spans its own way (Python objects,
 * or JSON text), so both raise the same errors for the same bytes.
 */

/* Bytes inside the batch data; size -1 (and data NULL) for null. */
typedef struct {
    const uint8_t *data;
    int32_t size;
} span;

typedef struct {
    int64_t offset, timestamp;
    span key, value;
    int32_t header_count;
    const uint8_t *headers; /* the first header, already validated; walk with parse_header */
    const uint8_t *end;     /* the end of the record */
} raw_record;

/* The records region of one batch and what every record's offset and timestamp add to. */
typedef struct {
    const uint8_t *p, *end;
    int64_t count, base_offset, base_timestamp, log_append_time;
} record_reader;

/* Kafka's Utils.readBytes: a negative length is null; one past the end is a structure error. */
static inline int body_bytes(const uint8_t **pp, const uint8_t *end, int32_t length, span *out)
{
    if (length < 0) {
        out->data = NULL;
        out->size = -1;
        return 0;
    }
    if (length > end - *pp) {
        raise_corrupt("Found invalid record structure");
        return -1;
    }
    out->data = *pp;
    out->size = length;
    *pp += length;
    return 0;
}

/* One header (Kafka's DefaultRecord.readHeaders): a key that may not be null, then a value. */
static inline int parse_header(const uint8_t **pp, const uint8_t *end, span *key, span *value)
{
    int32_t key_size, value_size;
    if (body_varint(pp, end, &key_size) < 0)
        return -1;
    if (key_size < 0) {
        PyErr_Format(CorruptRecordError, "Invalid negative header key size %d", (int)key_size);
        return -1;
    }
    if (body_bytes(pp, end, key_size, key) < 0 || body_varint(pp, end, &value_size) < 0)
        return -1;
    return body_bytes(pp, end, value_size, value);
}

/* Parse the next record; on error raise CorruptRecordError with Kafka's message and return -1. */
static int next_record(record_reader *r, raw_record *out)
{
    const uint8_t *p = r->p, *end = r->end;
    uint32_t u;
    int status = read_uvarint(&p, end, &u);
    if (status == VARINT_EOF) {
        raise_corrupt("Incorrect declared batch size, premature EOF reached");
        return -1;
    }
    if (status == VARINT_TOO_LONG) {
        raise_varint(status, u);
        return -1;
    }
    int32_t size = unzigzag32(u);
    if (end - p < size) {
        PyErr_Format(CorruptRecordError,
                     "Invalid record size: expected %d bytes in record payload, but instead the buffer has "
                     "only %zd remaining bytes.",
                     (int)size, (Py_ssize_t)(end - p));
        return -1;
    }
    /* The body: every field is read against the end of the data, as Kafka reads its buffer. */
    const uint8_t *start = p;
    int32_t offset_delta, key_size, value_size, header_count;
    uint64_t ts_raw;
    if (p >= end) {
        raise_corrupt("Found invalid record structure");
        return -1;
    }
    p++; /* attributes: no bits defined */
    if ((status = read_uvarlong(&p, end, &ts_raw)) != VARINT_OK) {
        raise_varlong(status, ts_raw);
        return -1;
    }
    if (body_varint(&p, end, &offset_delta) < 0 || body_varint(&p, end, &key_size) < 0 ||
        body_bytes(&p, end, key_size, &out->key) < 0 || body_varint(&p, end, &value_size) < 0 ||
        body_bytes(&p, end, value_size, &out->value) < 0 || body_varint(&p, end, &header_count) < 0)
        return -1;
    if (header_count < 0) {
        PyErr_Format(CorruptRecordError, "Found invalid number of record headers %d", (int)header_count);
        return -1;
    }
    if (header_count > end - p) {
        PyErr_Format(CorruptRecordError,
                     "Found invalid number of record headers. %d is larger than the remaining size of the buffer",
                     (int)header_count);
        return -1;
    }
    out->header_count = header_count;
    out->headers = p;
    for (int32_t i = 0; i < header_count; i++) {
        span key, value;
        if (parse_header(&p, end, &key, &value) < 0)
            return -1;
    }
    if (p - start != size) {
        PyErr_Format(CorruptRecordError,
                     "Invalid record size: expected to read %d bytes in record payload, but instead read %zd",
                     (int)size, (Py_ssize_t)(p - start));
        return -1;
    }
    out->end = p;
    out->timestamp = r->log_append_time != -1
                         ? r->log_append_time
                         : as_i64((uint64_t)r->base_timestamp + (uint64_t)unzigzag64(ts_raw));
    out->offset = as_i64((uint64_t)r->base_offset + (uint64_t)(int64_t)offset_delta);
    r->p = p;
    return 0;
}

/* After the last record: Kafka rejects bytes left over (but reads nothing at all for count 0). */
static int finish_records(const record_reader *r)
{
    if (r->count > 0 && r->p != r->end) {
        raise_corrupt("Incorrect declared batch size, records still remaining in file");
        return -1;
    }
    return 0;
}

/* The arguments both functions start with: (data, count, base_offset, base_timestamp,
 * log_append_time). On success the caller owns `view` and must release it. */
static int open_records(PyObject *const *args, record_reader *r, Py_buffer *view)
{
    if (arg_int64(args[1], "count", &r->count) < 0 || arg_int64(args[2], "base_offset", &r->base_offset) < 0 ||
        arg_int64(args[3], "base_timestamp", &r->base_timestamp) < 0 ||
        arg_int64(args[4], "log_append_time", &r->log_append_time) < 0)
        return -1;
    if (r->count < 0) {
        char n[24];
        snprintf(n, sizeof n, "%lld", (long long)r->count);
        PyErr_Format(CorruptRecordError, "Found invalid record count %s in magic v2 batch", n);
        return -1;
    }
    if (PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE) < 0)
        return -1;
    r->p = view->buf;
    r->end = r->p + view->len;
    return 0;
}

/* Every record takes at least 7 bytes, so no more than this many can be read before an error. */
static inline Py_ssize_t records_bound(const record_reader *r)
{
    Py_ssize_t capacity = (r->end - r->p) / 7 + 1;
    return r->count < capacity ? (Py_ssize_t)r->count : capacity;
}

/* ---------------------------------------------------------------------------------------------------
 * decode_records(data, count, base_offset, base_timestamp, log_append_time)
 */

static inline PyObject *span_bytes(span s)
{
    if (s.size < 0)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)s.data, s.size);
}

/* The headers of a parsed record as a tuple of (str, bytes | None); keys are UTF-8 with replacement. */
static PyObject *header_tuple(const raw_record *rec)
{
    PyObject *headers = PyTuple_New(rec->header_count);
    if (headers == NULL)
        return NULL;
    const uint8_t *p = rec->headers;
    for (int32_t i = 0; i < rec->header_count; i++) {
        span key_span, value_span;
        if (parse_header(&p, rec->end, &key_span, &value_span) < 0) /* validated: cannot fail */
            goto fail;
        PyObject *key = PyUnicode_DecodeUTF8((const char *)key_span.data, key_span.size, "replace");
        if (key == NULL)
            goto fail;
        PyObject *value = span_bytes(value_span);
        PyObject *pair = value == NULL ? NULL : PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(key);
            Py_XDECREF(value);
            goto fail;
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        PyTuple_SET_ITEM(headers, i, pair);
    }
    return headers;
fail:
    Py_DECREF(headers);
    return NULL;
}

static PyObject *record_object(const raw_record *rec, PyObject *empty_headers)
{
    PyObject *offset = NULL, *timestamp = NULL, *key = NULL, *value = NULL, *headers = NULL;
    if ((offset = PyLong_FromLongLong(rec->offset)) == NULL ||
        (timestamp = PyLong_FromLongLong(rec->timestamp)) == NULL || (key = span_bytes(rec->key)) == NULL ||
        (value = span_bytes(rec->value)) == NULL)
        goto fail;
    if (rec->header_count == 0) {
        headers = empty_headers;
        Py_INCREF(headers);
    } else if ((headers = header_tuple(rec)) == NULL) {
        goto fail;
    }
    PyObject *record = record_alloc(offset, timestamp, key, value, headers);
    if (record != NULL)
        return record;
fail:
    Py_XDECREF(offset);
    Py_XDECREF(timestamp);
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(headers);
    return NULL;
}

PyDoc_STRVAR(decode_records_doc,
             "decode_records($module, data, count, base_offset, base_timestamp, log_append_time, /)\n--\n\n"
             "Decode count v2 records from data, the (decompressed) records region of one batch.\n\n"
             "log_append_time is the batch's max timestamp for a LogAppendTime batch, else -1.\n"
             "Raises formats.errors.CorruptRecordError with Kafka's message on malformed bytes.");

static PyObject *native_decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (arg_count(nargs, 5, 5, "decode_records") < 0)
        return NULL;
    record_reader reader;
    Py_buffer view;
    if (open_records(args, &reader, &view) < 0)
        return NULL;
    Py_ssize_t allocated = records_bound(&reader);
    PyObject *records = PyList_New(allocated);
    PyObject *empty_headers = PyTuple_New(0);
    if (records == NULL || empty_headers == NULL)
        goto fail;
    for (int64_t i = 0; i < reader.count; i++) {
        raw_record rec;
        if (next_record(&reader, &rec) < 0)
            goto fail;
        PyObject *record = record_object(&rec, empty_headers);
        if (record == NULL)
            goto fail;
        if (i < allocated) {
            PyList_SET_ITEM(records, (Py_ssize_t)i, record);
        } else { /* unreachable by the 7-byte bound; kept so no input can write past the list */
            int rc = PyList_Append(records, record);
            Py_DECREF(record);
            if (rc < 0)
                goto fail;
        }
    }
    if (finish_records(&reader) < 0)
        goto fail;
    Py_DECREF(empty_headers);
    PyBuffer_Release(&view);
    return records;
fail:
    /* Unfilled list slots are NULL, which list dealloc skips. */
    Py_XDECREF(records);
    Py_XDECREF(empty_headers);
    PyBuffer_Release(&view);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------
 * json_records(data, count, base_offset, base_timestamp, log_append_time, base_sequence, key_mode,
 *              value_mode)
 *
 * The JSON lines `kcli dump-segment --output json` prints for the records of one v2 data batch,
 * straight from the record bytes: byte for byte what orjson.dumps makes of
 *   {"type":"record","offset":..,"timestamp":..,"sequence":..,"keySize":..,"valueSize":..,
 *    "key":..,"value":..,"headers":[[key,value],..]}
 * with key and value rendered as text by their mode: 0 UTF-8 (invalid sequences replaced by U+FFFD as
 * bytes.decode("utf-8", "replace") does), 1 lower-case hex, 2 padded standard base64. Header keys
 * are always UTF-8 text, header values use value_mode. orjson escapes '"', '\\' and the control
 * characters below 0x20 (\b \t \n \f \r, else \u00xx) and writes everything else as UTF-8.
 */

enum { MODE_STRING = 0, MODE_HEX = 1, MODE_BASE64 = 2 };

/* The output: a bytes object grown by doubling and cut to size at the end. */
typedef struct {
    PyObject *bytes;
    char *p, *limit;
} json_out;

/* Make room for n more bytes; every writer below reserves its worst case first, then writes freely. */
static int out_reserve(json_out *o, size_t n)
{
    if ((size_t)(o->limit - o->p) >= n)
        return 0;
    char *start = PyBytes_AS_STRING(o->bytes);
    size_t used = (size_t)(o->p - start), size = (size_t)(o->limit - start);
    size_t wanted = size * 2 > used + n ? size * 2 : used + n;
    if (wanted > (size_t)PY_SSIZE_T_MAX) {
        PyErr_NoMemory();
        return -1;
    }
    if (_PyBytes_Resize(&o->bytes, (Py_ssize_t)wanted) < 0)
        return -1;
    start = PyBytes_AS_STRING(o->bytes);
    o->p = start + used;
    o->limit = start + wanted;
    return 0;
}

#define LITERAL(o, s) (memcpy((o), (s), sizeof(s) - 1), (o) + sizeof(s) - 1)

static const char hex_digits[] = "0123456789abcdef";

static char *put_int64(char *o, int64_t v)
{
    char digits[20];
    int n = 0;
    uint64_t u = v < 0 ? 0u - (uint64_t)v : (uint64_t)v;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *o++ = '-';
    while (n)
        *o++ = digits[--n];
    return o;
}

/* orjson's escape for each ASCII byte: 0 none, else the character after the backslash ('u' for \u00xx). */
static const char json_escape[128] = {
    ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f', ['\r'] = 'r', ['"'] = '"', ['\\'] = '\\',
    [0x00] = 'u', [0x01] = 'u', [0x02] = 'u', [0x03] = 'u', [0x04] = 'u', [0x05] = 'u', [0x06] = 'u',
    [0x07] = 'u', [0x0B] = 'u', [0x0E] = 'u', [0x0F] = 'u', [0x10] = 'u', [0x11] = 'u', [0x12] = 'u',
    [0x13] = 'u', [0x14] = 'u', [0x15] = 'u', [0x16] = 'u', [0x17] = 'u', [0x18] = 'u', [0x19] = 'u',
    [0x1A] = 'u', [0x1B] = 'u', [0x1C] = 'u', [0x1D] = 'u', [0x1E] = 'u', [0x1F] = 'u',
};

/* Does any byte of the 8 need attention: a control character, '"', '\\', or a non-ASCII byte? */
static inline int word_needs_care(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
    uint64_t special = ((w - ones * 0x20) | (quote - ones) | (backslash - ones)) & ~w;
    return ((special | w) & highs) != 0;
}

/* Length of the well-formed UTF-8 sequence at s (2 to 4), or minus the number of bytes one U+FFFD
 * replaces: CPython's decoder replaces the longest prefix of a valid sequence (at least one byte). */
static inline int utf8_sequence(const uint8_t *s, const uint8_t *end)
{
    uint8_t c = s[0];
    ptrdiff_t available = end - s;
    if (c < 0xC2 || c > 0xF4)
        return -1;
    if (c < 0xE0)
        return available >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : -1;
    uint8_t lo = 0x80, hi = 0xBF; /* the second byte's range excludes overlongs, surrogates, > U+10FFFF */
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    if (available < 2 || s[1] < lo || s[1] > hi)
        return -1;
    if (available < 3 || (s[2] & 0xC0) != 0x80)
        return -2;
    if (c < 0xF0)
        return 3;
    if (available < 4 || (s[3] & 0xC0) != 0x80)
        return -3;
    return 4;
}

/* At most 6 output bytes per input byte (a control character's \u00xx), plus the quotes. */
static inline size_t string_bound(size_t n) { return 6 * n + 2; }

static char *put_string(char *o, const uint8_t *s, size_t n)
{
    const uint8_t *end = s + n;
    *o++ = '"';
    while (s < end) {
        while (end - s >= 8 && !word_needs_care(load_le64(s))) {
            memcpy(o, s, 8);
            o += 8;
            s += 8;
        }
        if (s >= end)
            break;
        uint8_t c = *s;
        if (c >= 0x80) {
            int length = utf8_sequence(s, end);
            if (length > 0) {
                memcpy(o, s, (size_t)length);
                o += length;
                s += length;
            } else {
                o = LITERAL(o, "\xEF\xBF\xBD"); /* U+FFFD */
                s -= length;
            }
            continue;
        }
        char escape = json_escape[c];
        s++;
        if (escape == 0) {
            *o++ = (char)c;
        } else if (escape != 'u') {
            *o++ = '\\';
            *o++ = escape;
        } else {
            o = LITERAL(o, "\\u00");
            *o++ = hex_digits[c >> 4];
            *o++ = hex_digits[c & 15];
        }
    }
    *o++ = '"';
    return o;
}

static char hex_pairs[256][2]; /* [b]: b's two lower-case hex digits, filled at import */

static void hex_init(void)
{
    for (int b = 0; b < 256; b++) {
        hex_pairs[b][0] = hex_digits[b >> 4];
        hex_pairs[b][1] = hex_digits[b & 15];
    }
}

static char *put_hex(char *o, const uint8_t *s, size_t n)
{
    *o++ = '"';
    for (size_t i = 0; i < n; i++, o += 2)
        memcpy(o, hex_pairs[s[i]], 2);
    *o++ = '"';
    return o;
}

static const char base64_digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *put_base64(char *o, const uint8_t *s, size_t n)
{
    *o++ = '"';
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *o++ = base64_digits[v >> 18];
        *o++ = base64_digits[(v >> 12) & 63];
        *o++ = base64_digits[(v >> 6) & 63];
        *o++ = base64_digits[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)s[i] << 16;
        *o++ = base64_digits[v >> 18];
        *o++ = base64_digits[(v >> 12) & 63];
        o = LITERAL(o, "==");
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;
        *o++ = base64_digits[v >> 18];
        *o++ = base64_digits[(v >> 12) & 63];
        *o++ = base64_digits[(v >> 6) & 63];
        *o++ = '=';
    }
    *o++ = '"';
    return o;
}

static inline size_t text_bound(int mode, size_t n)
{
    return mode == MODE_STRING ? string_bound(n) : mode == MODE_HEX ? 2 * n + 2 : (n + 2) / 3 * 4 + 2;
}

/* A key, value or header value as JSON: null, or a string in the given mode. */
static int put_text(json_out *o, int mode, span s)
{
    if (s.size < 0) {
        if (out_reserve(o, 4) < 0)
            return -1;
        o->p = LITERAL(o->p, "null");
        return 0;
    }
    if (out_reserve(o, text_bound(mode, (size_t)s.size)) < 0)
        return -1;
    size_t n = (size_t)s.size;
    o->p = mode == MODE_STRING ? put_string(o->p, s.data, n)
           : mode == MODE_HEX  ? put_hex(o->p, s.data, n)
                               : put_base64(o->p, s.data, n);
    return 0;
}

/* Room for the fixed text of one record: the field names, five integers and an empty header list. */
#define JSON_RECORD_FIXED 256

static int put_record(json_out *o, const raw_record *rec, int64_t base_offset, int64_t base_sequence,
                      int key_mode, int value_mode)
{
    if (out_reserve(o, JSON_RECORD_FIXED) < 0)
        return -1;
    int64_t sequence = base_sequence < 0
                           ? -1
                           : (int64_t)(((uint64_t)base_sequence + (uint64_t)rec->offset - (uint64_t)base_offset) &
                                       0x7FFFFFFFu);
    char *p = o->p;
    p = LITERAL(p, "{\"type\":\"record\",\"offset\":");
    p = put_int64(p, rec->offset);
    p = LITERAL(p, ",\"timestamp\":");
    p = put_int64(p, rec->timestamp);
    p = LITERAL(p, ",\"sequence\":");
    p = put_int64(p, sequence);
    p = LITERAL(p, ",\"keySize\":");
    p = put_int64(p, rec->key.size);
    p = LITERAL(p, ",\"valueSize\":");
    p = put_int64(p, rec->value.size);
    o->p = LITERAL(p, ",\"key\":");
    if (put_text(o, key_mode, rec->key) < 0 || out_reserve(o, 16) < 0)
        return -1;
    o->p = LITERAL(o->p, ",\"value\":");
    if (put_text(o, value_mode, rec->value) < 0 || out_reserve(o, 16) < 0)
        return -1;
    o->p = LITERAL(o->p, ",\"headers\":[");
    const uint8_t *h = rec->headers;
    for (int32_t i = 0; i < rec->header_count; i++) {
        span key, value;
        if (parse_header(&h, rec->end, &key, &value) < 0) /* validated: cannot fail */
            return -1;
        if (out_reserve(o, 3) < 0)
            return -1;
        if (i > 0)
            *o->p++ = ',';
        *o->p++ = '[';
        if (put_text(o, MODE_STRING, key) < 0 || out_reserve(o, 1) < 0)
            return -1;
        *o->p++ = ',';
        if (put_text(o, value_mode, value) < 0 || out_reserve(o, 2) < 0)
            return -1;
        *o->p++ = ']';
    }
    if (out_reserve(o, 3) < 0)
        return -1;
    o->p = LITERAL(o->p, "]}\n");
    return 0;
}

static int arg_mode(PyObject *obj, const char *name, int *out)
{
    int64_t mode;
    if (arg_int64(obj, name, &mode) < 0)
        return -1;
    if (mode != MODE_STRING && mode != MODE_HEX && mode != MODE_BASE64) {
        PyErr_Format(PyExc_ValueError, "%s must be 0 (string), 1 (hex) or 2 (base64), not %lld", name,
                     (long long)mode);
        return -1;
    }
    *out = (int)mode;
    return 0;
}

PyDoc_STRVAR(json_records_doc,
             "json_records($module, data, count, base_offset, base_timestamp, log_append_time,\n"
             "             base_sequence, key_mode, value_mode, /)\n--\n\n"
             "The JSON lines (each ending in a newline) of count v2 records in data, as kcli dump-segment\n"
             "prints them: decode_records' arguments and errors, plus the batch's base_sequence and\n"
             "how keys and values become text: 0 UTF-8 with replacement, 1 hex, 2 base64.");

static PyObject *native_json_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (arg_count(nargs, 8, 8, "json_records") < 0)
        return NULL;
    int64_t base_sequence;
    int key_mode, value_mode;
    if (arg_int64(args[5], "base_sequence", &base_sequence) < 0 || arg_mode(args[6], "key_mode", &key_mode) < 0 ||
        arg_mode(args[7], "value_mode", &value_mode) < 0)
        return NULL;
    record_reader reader;
    Py_buffer view;
    if (open_records(args, &reader, &view) < 0)
        return NULL;
    /* A first guess that holds typical records (text no longer than the bytes) without growing. */
    Py_ssize_t guess = records_bound(&reader) * 160 + view.len + view.len / 4 + 64;
    json_out out = {PyBytes_FromStringAndSize(NULL, guess), NULL, NULL};
    if (out.bytes == NULL)
        goto fail;
    out.p = PyBytes_AS_STRING(out.bytes);
    out.limit = out.p + guess;
    for (int64_t i = 0; i < reader.count; i++) {
        raw_record rec;
        if (next_record(&reader, &rec) < 0 ||
            put_record(&out, &rec, reader.base_offset, base_sequence, key_mode, value_mode) < 0)
            goto fail;
    }
    if (finish_records(&reader) < 0)
        goto fail;
    PyBuffer_Release(&view);
    if (_PyBytes_Resize(&out.bytes, out.p - PyBytes_AS_STRING(out.bytes)) < 0)
        return NULL;
    return out.bytes;
fail:
    Py_XDECREF(out.bytes);
    PyBuffer_Release(&view);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------
 * encode_records(records, base_timestamp)
 *
 * The records region of a v2 batch, each record as Kafka's DefaultRecord.writeTo writes it: its length,
 * then attributes (0), timestampDelta, offsetDelta, key, value and headers. An item is a Record (its
 * offset is not used: it takes the next offset delta) or a tuple laid out as formats.records.RecordSpec,
 * (timestamp, key, value[, headers[, offset_delta]]), where an offset_delta of None is the next one.
 * Two passes: the first checks every item and sizes every record, the second writes into one bytes
 * object of exactly that size. Only C code runs between the passes (ints must be ints, headers tuples
 * or lists), so nothing can change an item's size under the second pass.
 */

static inline uint64_t zigzag64(int64_t v) { return ((uint64_t)v << 1) ^ (0u - ((uint64_t)v >> 63)); }

static inline Py_ssize_t uvarlong_size(uint64_t u)
{
    Py_ssize_t n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_uvarlong(uint8_t *o, uint64_t u)
{
    while (u >= 0x80) {
        *o++ = (uint8_t)(u | 0x80);
        u >>= 7;
    }
    *o++ = (uint8_t)u;
    return o;
}

/* A key, value or header value: bytes, another contiguous buffer, or None (size -1). */
typedef struct {
    const char *data;
    Py_ssize_t size;
    Py_buffer view; /* held when view.obj is set: release with blob_release */
} blob;

static int blob_get(PyObject *obj, const char *what, blob *out)
{
    out->view.obj = NULL;
    if (PyBytes_CheckExact(obj)) {
        out->data = PyBytes_AS_STRING(obj);
        out->size = PyBytes_GET_SIZE(obj);
        return 0;
    }
    if (obj == Py_None) {
        out->data = NULL;
        out->size = -1;
        return 0;
    }
    if (!PyObject_CheckBuffer(obj) || PyObject_GetBuffer(obj, &out->view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "a record %s must be bytes or None, not %.100s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    out->data = out->view.buf;
    out->size = out->view.len;
    return 0;
}

static inline void blob_release(blob *b)
{
    if (b->view.obj != NULL)
        PyBuffer_Release(&b->view);
}

static inline Py_ssize_t blob_encoded_size(const blob *b)
{
    return b->size < 0 ? 1 : uvarlong_size(zigzag64(b->size)) + b->size;
}

static inline uint8_t *put_blob(uint8_t *o, const blob *b)
{
    if (b->size < 0) {
        *o++ = 1; /* zig-zag(-1): null */
        return o;
    }
    o = put_uvarlong(o, zigzag64(b->size));
    if (b->size > 0)
        memcpy(o, b->data, (size_t)b->size);
    return o + b->size;
}

/* One item's fields; headers is a tuple or list of (str, bytes | None) pairs. */
typedef struct {
    PyObject *timestamp, *key, *value, *headers, *offset_delta; /* borrowed; offset_delta may be NULL */
} record_fields;

static int item_fields(PyObject *item, record_fields *f)
{
    if (Py_IS_TYPE(item, &RecordType)) {
        PyObject *const *items = ((PyTupleObject *)item)->ob_item;
        *f = (record_fields){items[1], items[2], items[3], items[4], NULL};
    } else if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) >= 3 && PyTuple_GET_SIZE(item) <= 5) {
        Py_ssize_t n = PyTuple_GET_SIZE(item);
        *f = (record_fields){PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1), PyTuple_GET_ITEM(item, 2),
                             n > 3 ? PyTuple_GET_ITEM(item, 3) : NULL, n > 4 ? PyTuple_GET_ITEM(item, 4) : NULL};
        if (f->offset_delta == Py_None)
            f->offset_delta = NULL;
    } else {
        PyErr_Format(PyExc_TypeError,
                     "a record must be a Record or a (timestamp, key, value[, headers[, offset_delta]]) tuple, "
                     "not %.100s",
                     Py_TYPE(item)->tp_name);
        return -1;
    }
    if (f->headers != NULL && !PyTuple_Check(f->headers) && !PyList_Check(f->headers)) {
        PyErr_Format(PyExc_TypeError, "record headers must be a tuple or list, not %.100s",
                     Py_TYPE(f->headers)->tp_name);
        return -1;
    }
    return 0;
}

static int exact_int64(PyObject *obj, const char *name, int64_t *out)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "a record %s must be an int, not %.100s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    return arg_int64(obj, name, out);
}

/* One header pair as (UTF-8 name, value); the name's UTF-8 is cached by the str itself. */
static int header_fields(PyObject *pair, const char **name, Py_ssize_t *name_size, blob *value)
{
    if ((!PyTuple_Check(pair) && !PyList_Check(pair)) || PySequence_Fast_GET_SIZE(pair) != 2) {
        PyErr_Format(PyExc_TypeError, "a record header must be a (str, bytes | None) pair, not %.100s",
                     Py_TYPE(pair)->tp_name);
        return -1;
    }
    PyObject *key = PySequence_Fast_GET_ITEM(pair, 0);
    if (!PyUnicode_Check(key)) {
        PyErr_Format(PyExc_TypeError, "a record header key must be a str, not %.100s", Py_TYPE(key)->tp_name);
        return -1;
    }
    *name = PyUnicode_AsUTF8AndSize(key, name_size);
    if (*name == NULL)
        return -1;
    return blob_get(PySequence_Fast_GET_ITEM(pair, 1), "header value", value);
}

/* The size of one record's body (after its length) and the record's offset delta; checks every field. */
static int record_body_size(const record_fields *f, int64_t base_timestamp, int64_t offset_delta,
                            int64_t *timestamp, Py_ssize_t *out)
{
    if (exact_int64(f->timestamp, "timestamp", timestamp) < 0)
        return -1;
    Py_ssize_t size = 1 + uvarlong_size(zigzag64((int64_t)((uint64_t)*timestamp - (uint64_t)base_timestamp))) +
                      uvarlong_size(zigzag64(offset_delta));
    blob key, value;
    if (blob_get(f->key, "key", &key) < 0)
        return -1;
    size += blob_encoded_size(&key);
    blob_release(&key);
    if (blob_get(f->value, "value", &value) < 0)
        return -1;
    size += blob_encoded_size(&value);
    blob_release(&value);
    Py_ssize_t count = f->headers == NULL ? 0 : PySequence_Fast_GET_SIZE(f->headers);
    size += uvarlong_size(zigzag64(count));
    for (Py_ssize_t i = 0; i < count; i++) {
        const char *name;
        Py_ssize_t name_size;
        blob hvalue;
        if (header_fields(PySequence_Fast_GET_ITEM(f->headers, i), &name, &name_size, &hvalue) < 0)
            return -1;
        size += uvarlong_size(zigzag64(name_size)) + name_size + blob_encoded_size(&hvalue);
        blob_release(&hvalue);
    }
    *out = size;
    return 0;
}

static uint8_t *put_encoded_record(uint8_t *o, const record_fields *f, int64_t timestamp_delta, int64_t offset_delta,
                           Py_ssize_t body_size)
{
    o = put_uvarlong(o, zigzag64(body_size));
    *o++ = 0; /* attributes: unused in v2 records */
    o = put_uvarlong(o, zigzag64(timestamp_delta));
    o = put_uvarlong(o, zigzag64(offset_delta));
    blob key, value;
    blob_get(f->key, "key", &key); /* checked by the first pass: cannot fail */
    o = put_blob(o, &key);
    blob_release(&key);
    blob_get(f->value, "value", &value);
    o = put_blob(o, &value);
    blob_release(&value);
    Py_ssize_t count = f->headers == NULL ? 0 : PySequence_Fast_GET_SIZE(f->headers);
    o = put_uvarlong(o, zigzag64(count));
    for (Py_ssize_t i = 0; i < count; i++) {
        const char *name;
        Py_ssize_t name_size;
        blob hvalue;
        header_fields(PySequence_Fast_GET_ITEM(f->headers, i), &name, &name_size, &hvalue);
        o = put_uvarlong(o, zigzag64(name_size));
        memcpy(o, name, (size_t)name_size);
        o += name_size;
        o = put_blob(o, &hvalue);
        blob_release(&hvalue);
    }
    return o;
}

PyDoc_STRVAR(encode_records_doc,
             "encode_records($module, records, base_timestamp, /)\n--\n\n"
             "The records region of a v2 batch: (data, last_offset_delta, max_timestamp).\n\n"
             "records is a list or tuple of Records (offsets not used: each takes the next offset delta)\n"
             "or (timestamp, key, value[, headers[, offset_delta]]) tuples (RecordSpec), offset_delta None\n"
             "meaning the next. An empty list gives (b'', -1, -1).");

static PyObject *native_encode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (arg_count(nargs, 2, 2, "encode_records") < 0)
        return NULL;
    PyObject *records = args[0];
    if (!PyList_Check(records) && !PyTuple_Check(records)) {
        PyErr_Format(PyExc_TypeError, "records must be a list or tuple, not %.100s", Py_TYPE(records)->tp_name);
        return NULL;
    }
    int64_t base_timestamp;
    if (arg_int64(args[1], "base_timestamp", &base_timestamp) < 0)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(records);
    typedef struct {
        int64_t timestamp, offset_delta;
        Py_ssize_t body_size;
    } sized;
    sized *sizes = PyMem_Malloc(n > 0 ? (size_t)n * sizeof(sized) : 1);
    if (sizes == NULL)
        return PyErr_NoMemory();
    PyObject *data = NULL;
    int64_t offset_delta = -1, max_timestamp = -1;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        record_fields f;
        if (item_fields(PySequence_Fast_GET_ITEM(records, i), &f) < 0)
            goto done;
        if (f.offset_delta == NULL)
            offset_delta++;
        else if (exact_int64(f.offset_delta, "offset_delta", &offset_delta) < 0)
            goto done;
        sized *s = &sizes[i];
        s->offset_delta = offset_delta;
        if (record_body_size(&f, base_timestamp, offset_delta, &s->timestamp, &s->body_size) < 0)
            goto done;
        if (i == 0 || s->timestamp > max_timestamp)
            max_timestamp = s->timestamp;
        if (s->body_size > PY_SSIZE_T_MAX / 2 - total - 10) {
            PyErr_SetString(PyExc_OverflowError, "records too large to encode");
            goto done;
        }
        total += uvarlong_size(zigzag64(s->body_size)) + s->body_size;
    }
    data = PyBytes_FromStringAndSize(NULL, total);
    if (data == NULL)
        goto done;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(data);
    for (Py_ssize_t i = 0; i < n; i++) {
        record_fields f;
        item_fields(PySequence_Fast_GET_ITEM(records, i), &f); /* checked by the first pass */
        const sized *s = &sizes[i];
        o = put_encoded_record(o, &f, (int64_t)((uint64_t)s->timestamp - (uint64_t)base_timestamp), s->offset_delta,
                       s->body_size);
    }
done:
    PyMem_Free(sizes);
    if (data == NULL)
        return NULL;
    return Py_BuildValue("(NLL)", data, (long long)offset_delta, (long long)max_timestamp);
}

/* ---------------------------------------------------------------------------------------------------
 * murmur2(data)
 *
 * Kafka's Utils.murmur2, the hash behind the Java producer's partition for a keyed record: 32-bit
 * MurmurHash2 with seed 0x9747b28c, little-endian 4-byte blocks, returned as a signed Java int.
 */

PyDoc_STRVAR(murmur2_doc, "murmur2($module, data, /)\n--\n\n"
                          "Kafka's Utils.murmur2 of a bytes-like object, as a signed 32-bit int.");

static PyObject *native_murmur2(PyObject *module, PyObject *data)
{
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *p = view.buf;
    size_t length = (size_t)view.len;
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    size_t whole = length & ~(size_t)3;
    for (size_t i = 0; i < whole; i += 4) {
        uint32_t k = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 | (uint32_t)p[i + 3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)p[whole + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)p[whole + 1] << 8;
        /* fall through */
    case 1:
        h ^= p[whole];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    PyBuffer_Release(&view);
    return PyLong_FromLong(as_i32(h));
}

/* ---------------------------------------------------------------------------------------------------
 * A receive buffer
 */

PyDoc_STRVAR(uninitialized_bytearray_doc,
             "uninitialized_bytearray(size, /)\n--\n\n"
             "A bytearray of `size` bytes as malloc hands them out, not zeroed: for a buffer that is\n"
             "filled whole before anything reads it, as a frame received from a socket. bytearray(size)\n"
             "writes every byte twice (the zeroing, then the data); a follower receives ~1 GiB per GiB\n"
             "it replicates.");

static PyObject *native_uninitialized_bytearray(PyObject *module, PyObject *arg)
{
    Py_ssize_t size = PyLong_AsSsize_t(arg);
    if (size == -1 && PyErr_Occurred())
        return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "a buffer size cannot be negative");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, size);
}

/* ---------------------------------------------------------------------------------------------------
 * Module
 */

static PyMethodDef native_methods[] = {
    {"crc32c", (PyCFunction)(void (*)(void))native_crc32c, METH_FASTCALL | METH_KEYWORDS, crc32c_doc},
    {"scan", (PyCFunction)(void (*)(void))native_scan, METH_FASTCALL, scan_doc},
    {"decode_records", (PyCFunction)(void (*)(void))native_decode_records, METH_FASTCALL, decode_records_doc},
    {"json_records", (PyCFunction)(void (*)(void))native_json_records, METH_FASTCALL, json_records_doc},
    {"encode_records", (PyCFunction)(void (*)(void))native_encode_records, METH_FASTCALL, encode_records_doc},
    {"murmur2", native_murmur2, METH_O, murmur2_doc},
    {"uninitialized_bytearray", native_uninitialized_bytearray, METH_O, uninitialized_bytearray_doc},
    {"_crc32c_portable", (PyCFunction)(void (*)(void))native_crc32c_portable, METH_FASTCALL,
     crc32c_portable_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    "formats._native",
    "Compiled hot loops over Kafka record batches: CRC-32C, the batch walk, v2 record decoding and encoding, JSON lines.",
    -1,
    native_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    crc_init();
    hex_init();
    PyObject *errors = PyImport_ImportModule("formats.errors");
    if (errors == NULL)
        return NULL;
    CorruptRecordError = PyObject_GetAttrString(errors, "CorruptRecordError");
    Py_DECREF(errors);
    if (CorruptRecordError == NULL)
        return NULL;
    if (record_type_ready() < 0)
        return NULL;
    PyObject *module = PyModule_Create(&native_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&RecordType);
    if (PyModule_AddObject(module, "Record", (PyObject *)&RecordType) < 0 ||
        PyModule_AddStringConstant(module, "crc32c_implementation",
                                   crc_update == crc_update_portable ? "portable" : "sse4.2+pclmul") < 0 ||
        PyModule_AddIntConstant(module, "SCAN_END", SCAN_END) < 0 ||
        PyModule_AddIntConstant(module, "SCAN_LEGACY", SCAN_LEGACY) < 0 ||
        PyModule_AddIntConstant(module, "SCAN_BAD_SIZE", SCAN_BAD_SIZE) < 0 ||
        PyModule_AddIntConstant(module, "SCAN_BAD_MAGIC", SCAN_BAD_MAGIC) < 0) {
        Py_DECREF(&RecordType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
