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

/* One three-way block: streams of `len` bytes (a multiple of 8) at p, p + len, p + 2 len. */
CRC_HW static inline uint64_t crc_three_way_hw(uint64_t c0, const uint8_t *p, size_t len)
{
    const uint8_t *a = p, *b = p + len, *c = p + 2 * len;
    uint64_t c1 = 0, c2 = 0;
    size_t i = 0;
    for (; i + 32 <= len; i += 32) {
        c0 = _mm_crc32_u64(c0, load_le64(a + i));
        c1 = _mm_crc32_u64(c1, load_le64(b + i));
        c2 = _mm_crc32_u64(c2, load_le64(c + i));
        c0 = _mm_crc32_u64(c0, load_le64(a + i + 8));
        c1 = _mm_crc32_u64(c1, load_le64(b + i + 8));
        c2 = _mm_crc32_u64(c2, load_le64(c + i + 8));
        c0 = _mm_crc32_u64(c0, load_le64(a + i + 16));
        c1 = _mm_crc32_u64(c1, load_le64(b + i + 16));
        c2 = _mm_crc32_u64(c2, load_le64(c + i + 16));
        c0 = _mm_crc32_u64(c0, load_le64(a + i + 24));
        c1 = _mm_crc32_u64(c1, load_le64(b + i + 24));
        c2 = _mm_crc32_u64(c2, load_le64(c + i + 24));
    }
    for (; i < len; i += 8) {
        c0 = _mm_crc32_u64(c0, load_le64(a + i));
        c1 = _mm_crc32_u64(c1, load_le64(b + i));
        c2 = _mm_crc32_u64(c2, load_le64(c + i));
    }
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
    size_t i = 0;
    for (; i + 32 <= common; i += 32) {
        c0 = _mm_crc32_u64(c0, load_le64(a + i));
        c1 = _mm_crc32_u64(c1, load_le64(b + i));
        c2 = _mm_crc32_u64(c2, load_le64(c + i));
        c0 = _mm_crc32_u64(c0, load_le64(a + i + 8));
        c1 = _mm_crc32_u64(c1, load_le64(b + i + 8));
        c2 = _mm_crc32_u64(c2, load_le64(c + i + 8));
        c0 = _mm_crc32_u64(c0, load_le64(a + i + 16));
        c1 = _mm_crc32_u64(c1, load_le64(b + i + 16));
        c2 = _mm_crc32_u64(c2, load_le64(c + i + 16));
        c0 = _mm_crc32_u64(c0, load_le64(a + i + 24));
        c1 = _mm_crc32_u64(c1, load_le64(b + i + 24));
        c2 = _mm_crc32_u64(c2, load_le64(c + i + 24));
    }
    for (; i < common; i += 8) {
        c0 = _mm_crc32_u64(c0, load_le64(a + i));
        c1 = _mm_crc32_u64(c1, load_le64(b + i));
        c2 = _mm_crc32_u64(c2, load_le64(c + i));
    }
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
#define SCAN_CHUNK 64            /* batches per GIL-free CRC pass */

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
static PyObject *batch_tuple(const scan_entry *e)
{
    const uint8_t *h = e->header;
    PyObject *t = PyTuple_New(15);
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
             "scan($module, buf, position, end, check_crc, /)\n--\n\n"
             "Walk the units of buf[position:end]; return (batches, stop, reason).\n\n"
             "batches holds one 15-tuple per complete magic-2 batch, in header order:\n"
             "(position, base_offset, batch_length, partition_leader_epoch, magic, crc, attributes,\n"
             " last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,\n"
             " base_sequence, records_count, crc_valid). reason: 0 end (or an incomplete unit at stop),\n"
             "1 legacy v0/v1 unit at stop, 2 bad size at stop, 3 bad magic at stop.");

static PyObject *native_scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (arg_count(nargs, 4, 4, "scan") < 0)
        return NULL;
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
    scan_entry entries[SCAN_CHUNK];
    int reason;
    do {
        Py_ssize_t n;
        if (check_crc && end - pos >= CRC_RELEASE_GIL_BYTES) {
            Py_BEGIN_ALLOW_THREADS reason = scan_chunk(buf, &pos, (Py_ssize_t)end, 1, entries, &n);
            Py_END_ALLOW_THREADS
        } else {
            reason = scan_chunk(buf, &pos, (Py_ssize_t)end, check_crc, entries, &n);
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *t = batch_tuple(&entries[i]);
            if (t == NULL || PyList_Append(batches, t) < 0) {
                Py_XDECREF(t);
                Py_DECREF(batches);
                PyBuffer_Release(&view);
                return NULL;
            }
            Py_DECREF(t);
        }
    } while (reason == SCAN_MORE);
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

/* Kafka's Utils.readBytes: a negative length is null; one past the end is a structure error. */
static inline PyObject *body_bytes(const uint8_t **pp, const uint8_t *end, int32_t length)
{
    if (length < 0)
        Py_RETURN_NONE;
    if (length > end - *pp) {
        raise_corrupt("Found invalid record structure");
        return NULL;
    }
    PyObject *b = PyBytes_FromStringAndSize((const char *)*pp, length);
    *pp += length;
    return b;
}

static PyObject *read_headers(const uint8_t **pp, const uint8_t *end, int32_t count)
{
    PyObject *headers = PyTuple_New(count);
    if (headers == NULL)
        return NULL;
    for (int32_t i = 0; i < count; i++) {
        int32_t key_size, value_size;
        if (body_varint(pp, end, &key_size) < 0)
            goto fail;
        if (key_size < 0) {
            PyErr_Format(CorruptRecordError, "Invalid negative header key size %d", (int)key_size);
            goto fail;
        }
        if (key_size > end - *pp) {
            raise_corrupt("Found invalid record structure");
            goto fail;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)*pp, key_size, "replace");
        if (key == NULL)
            goto fail;
        *pp += key_size;
        PyObject *value = NULL;
        if (body_varint(pp, end, &value_size) < 0 || (value = body_bytes(pp, end, value_size)) == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
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

/* One record starting at *pp (its length varint already read into `size`, body at *pp). */
static PyObject *read_record(const uint8_t **pp, const uint8_t *end, int32_t size, int64_t base_offset,
                             int64_t base_timestamp, int64_t log_append_time, PyObject *empty_headers)
{
    const uint8_t *start = *pp, *p = start;
    PyObject *key = NULL, *value = NULL, *headers = NULL, *offset_obj = NULL, *timestamp_obj = NULL;
    int32_t offset_delta, key_size, value_size, header_count;
    uint64_t ts_raw;
    int status;

    if (p >= end) {
        raise_corrupt("Found invalid record structure");
        return NULL;
    }
    p++; /* attributes: no bits defined */
    if ((status = read_uvarlong(&p, end, &ts_raw)) != VARINT_OK) {
        raise_varlong(status, ts_raw);
        return NULL;
    }
    if (body_varint(&p, end, &offset_delta) < 0 || body_varint(&p, end, &key_size) < 0)
        return NULL;
    if ((key = body_bytes(&p, end, key_size)) == NULL)
        return NULL;
    if (body_varint(&p, end, &value_size) < 0 || (value = body_bytes(&p, end, value_size)) == NULL)
        goto fail;
    if (body_varint(&p, end, &header_count) < 0)
        goto fail;
    if (header_count < 0) {
        PyErr_Format(CorruptRecordError, "Found invalid number of record headers %d", (int)header_count);
        goto fail;
    }
    if (header_count > end - p) {
        PyErr_Format(CorruptRecordError,
                     "Found invalid number of record headers. %d is larger than the remaining size of the buffer",
                     (int)header_count);
        goto fail;
    }
    if (header_count == 0) {
        headers = empty_headers;
        Py_INCREF(headers);
    } else if ((headers = read_headers(&p, end, header_count)) == NULL) {
        goto fail;
    }
    if (p - start != size) {
        PyErr_Format(CorruptRecordError,
                     "Invalid record size: expected to read %d bytes in record payload, but instead read %zd",
                     (int)size, (Py_ssize_t)(p - start));
        goto fail;
    }
    int64_t timestamp = log_append_time != -1
                            ? log_append_time
                            : as_i64((uint64_t)base_timestamp + (uint64_t)unzigzag64(ts_raw));
    int64_t offset = as_i64((uint64_t)base_offset + (uint64_t)(int64_t)offset_delta);
    if ((offset_obj = PyLong_FromLongLong(offset)) == NULL ||
        (timestamp_obj = PyLong_FromLongLong(timestamp)) == NULL)
        goto fail;
    PyObject *record = record_alloc(offset_obj, timestamp_obj, key, value, headers);
    if (record == NULL)
        goto fail;
    *pp = p;
    return record;
fail:
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(headers);
    Py_XDECREF(offset_obj);
    Py_XDECREF(timestamp_obj);
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
    int64_t count, base_offset, base_timestamp, log_append_time;
    if (arg_int64(args[1], "count", &count) < 0 || arg_int64(args[2], "base_offset", &base_offset) < 0 ||
        arg_int64(args[3], "base_timestamp", &base_timestamp) < 0 ||
        arg_int64(args[4], "log_append_time", &log_append_time) < 0)
        return NULL;
    if (count < 0) {
        char n[24];
        snprintf(n, sizeof n, "%lld", (long long)count);
        PyErr_Format(CorruptRecordError, "Found invalid record count %s in magic v2 batch", n);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *p = view.buf, *end = p + view.len;
    /* Every record takes at least 7 bytes, so a larger count fails before the list would fill. */
    Py_ssize_t capacity = view.len / 7 + 1;
    Py_ssize_t allocated = count < capacity ? (Py_ssize_t)count : capacity;
    PyObject *records = PyList_New(allocated);
    PyObject *empty_headers = PyTuple_New(0);
    if (records == NULL || empty_headers == NULL)
        goto fail;
    for (int64_t i = 0; i < count; i++) {
        uint32_t u;
        int status = read_uvarint(&p, end, &u);
        if (status == VARINT_EOF) {
            raise_corrupt("Incorrect declared batch size, premature EOF reached");
            goto fail;
        }
        if (status == VARINT_TOO_LONG) {
            raise_varint(status, u);
            goto fail;
        }
        int32_t size = unzigzag32(u);
        if (end - p < size) {
            PyErr_Format(CorruptRecordError,
                         "Invalid record size: expected %d bytes in record payload, but instead the buffer has "
                         "only %zd remaining bytes.",
                         (int)size, (Py_ssize_t)(end - p));
            goto fail;
        }
        PyObject *record = read_record(&p, end, size, base_offset, base_timestamp, log_append_time, empty_headers);
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
    if (count > 0 && p != end) {
        raise_corrupt("Incorrect declared batch size, records still remaining in file");
        goto fail;
    }
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
 * Module
 */

static PyMethodDef native_methods[] = {
    {"crc32c", (PyCFunction)(void (*)(void))native_crc32c, METH_FASTCALL | METH_KEYWORDS, crc32c_doc},
    {"scan", (PyCFunction)(void (*)(void))native_scan, METH_FASTCALL, scan_doc},
    {"decode_records", (PyCFunction)(void (*)(void))native_decode_records, METH_FASTCALL, decode_records_doc},
    {"_crc32c_portable", (PyCFunction)(void (*)(void))native_crc32c_portable, METH_FASTCALL,
     crc32c_portable_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    "formats._native",
    "Compiled hot loops over Kafka record batches: CRC-32C, the batch walk, v2 record decoding.",
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
