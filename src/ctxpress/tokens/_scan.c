/* The token estimate's scan in C: an optional speed-up of ctxpress.tokens (S12, issue 18 item 13).
 *
 * Everything here has a pure-Python twin that gives the same numbers, and the package works
 * without this module (setup.py builds it as an optional extension):
 *
 * - features(text): features.text_features -- the 17 character-class counts of one text, read off
 *   its code points (no UTF-8 copy); each class is defined by the UTF-8 lead byte the Python scan
 *   looks at, so the two agree on every text, lone surrogates included;
 * - estimates(texts, weights, letters_free, letters_per_extra, one_token_bitmap): estimate.weigh of
 *   each text's features, summed left to right in double precision like functools.reduce does
 *   (built with -ffp-contract=off, so no fused multiply-add changes a rounding);
 * - first_sight(messages, fields, weights, letters_free, letters_per_extra, one_token_bitmap, kinds,
 *   overheads, provider_json, fallback): messages.each_message_tokens of a thread seen for the first
 *   time. It reads each message's counted fields from the tuple the whole-message memo has just
 *   built (message_memo.message_fields: class, content, name, then tool_call_id, or tool_calls,
 *   invalid_tool_calls, additional_kwargs), so the message objects are not read a second time;
 *   the common shapes (string content, name, tool_call_id, tool calls with their provider-format
 *   mirror) are counted here and any other message goes to fallback(message).
 *
 * Python code may run in the middle of first_sight (provider_json, fallback, a dict key's __eq__),
 * so every object read is held by a reference of our own while it is in use: the messages and
 * their fields are walked as tuple copies, and a list or dict item is held while it is read.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

enum {
    HAN, CJK_PUNCT, KANA_HANGUL, OTHER_BMP, TWO_BYTE, ASTRAL,
    LETTERS, LETTER_RUNS, DIGITS, DIGIT_RUNS, PUNCT, PUNCT_RUNS,
    SPACES, SPACE_RUNS, NEWLINES, NEWLINE_RUNS, JSON_ESCAPES,
    FEATURE_COUNT
};

/* The ASCII classes, each counted in a 12-bit field of one 64-bit accumulator: adding to a register
 * keeps the loop free of the store-to-load chain that incrementing a counter in memory per
 * character would make (Chinese and English text alike run at about a byte per cycle or two). */
enum { LETTER, DIGIT, SPACE, NEWLINE, PUNCTUATION, ASCII_CLASSES };
#define FIELD_BITS 12
#define FIELD_MAX ((1 << FIELD_BITS) - 1) /* characters per chunk: no field can overflow */
#define NOT_ASCII_SHIFT 63                /* `previous` after a non-ASCII character: ends every run */

static const int CLASS_FEATURE[ASCII_CLASSES] = {LETTERS, DIGITS, SPACES, NEWLINES, PUNCT};
static const int CLASS_RUN_FEATURE[ASCII_CLASSES] = {LETTER_RUNS, DIGIT_RUNS, SPACE_RUNS, NEWLINE_RUNS, PUNCT_RUNS};

/* Ideographs U+4000-9FFF, one bit each, in the one-token bitmap. */
#define IDEOGRAPH_FIRST 0x4000
#define IDEOGRAPH_LAST 0x9FFF
#define BITMAP_BYTES ((IDEOGRAPH_LAST - IDEOGRAPH_FIRST + 1) / 8)

/* An ASCII character's class times FIELD_BITS: where it is counted in the accumulators. */
static unsigned char ascii_shift[128];

static void init_ascii_shift(void) {
    for (int c = 0; c < 128; c++) {
        int cls;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) cls = LETTER;
        else if (c >= '0' && c <= '9') cls = DIGIT;
        else if (c == ' ' || c == '\t') cls = SPACE;
        else if (c == '\n' || c == '\r') cls = NEWLINE;
        else cls = PUNCTUATION;
        ascii_shift[c] = (unsigned char)(cls * FIELD_BITS);
    }
}

typedef struct {
    long long counts[FEATURE_COUNT];
    long long one_token_ideographs; /* of HAN, those set in the bitmap (when one is given) */
} Scan;

/* One pass over the code points. A non-ASCII code point is classed by the UTF-8 lead byte that
 * features.py's byte scan reads: C0-DF two-byte; E4-E9 (U+4000-9FFF) han; E3 80 (U+3000-303F) and
 * EF BC / EF BD (U+FF00-FF7F) CJK punctuation; the rest of E3 and EA-ED (U+A000-DFFF, surrogates
 * included) kana/hangul; other three-byte leads other BMP; F0 and up astral. */
#define SCAN_LOOP(CHAR_TYPE)                                                                     \
    do {                                                                                         \
        const CHAR_TYPE *chars = (const CHAR_TYPE *)data;                                        \
        Py_ssize_t i = 0;                                                                        \
        while (i < length) {                                                                     \
            Py_ssize_t end = length - i > FIELD_MAX ? i + FIELD_MAX : length;                    \
            uint64_t packed = 0, packed_runs = 0;                                                \
            for (; i < end; i++) {                                                               \
                Py_UCS4 c = chars[i];                                                            \
                if (c < 128) {                                                                   \
                    unsigned shift = ascii_shift[c];                                             \
                    packed += (uint64_t)1 << shift;                                              \
                    packed_runs += (uint64_t)(shift != previous) << shift;                       \
                    previous = shift;                                                            \
                    if (c == '\\' && i + 1 < length && chars[i + 1] == 'u') escapes++;           \
                    continue;                                                                    \
                }                                                                                \
                previous = NOT_ASCII_SHIFT;                                                      \
                if (c >= IDEOGRAPH_FIRST && c <= IDEOGRAPH_LAST) {                               \
                    han++;                                                                       \
                    if (bitmap != NULL) {                                                        \
                        unsigned offset = (unsigned)(c - IDEOGRAPH_FIRST);                       \
                        one_token += (bitmap[offset >> 3] >> (offset & 7)) & 1;                  \
                    }                                                                            \
                } else if (c < 0x800) {                                                          \
                    two_byte++;                                                                  \
                } else if (c >= 0x10000) {                                                       \
                    astral++;                                                                    \
                } else if ((c >= 0x3000 && c <= 0x303F) || (c >= 0xFF00 && c <= 0xFF7F)) {       \
                    cjk_punct++;                                                                 \
                } else if ((c >= 0x3040 && c <= 0x3FFF) || (c >= 0xA000 && c <= 0xDFFF)) {       \
                    kana_hangul++;                                                               \
                } else {                                                                         \
                    other_bmp++;                                                                 \
                }                                                                                \
            }                                                                                    \
            for (int cls = 0; cls < ASCII_CLASSES; cls++) {                                      \
                scan->counts[CLASS_FEATURE[cls]] += (packed >> (cls * FIELD_BITS)) & FIELD_MAX;  \
                scan->counts[CLASS_RUN_FEATURE[cls]] += (packed_runs >> (cls * FIELD_BITS)) & FIELD_MAX; \
            }                                                                                    \
        }                                                                                        \
    } while (0)

/* Fills `scan` from `text` (an exact or sub-classed str); never fails on a ready str. */
static void scan_text(PyObject *text, const unsigned char *bitmap, Scan *scan) {
    memset(scan, 0, sizeof(*scan));
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    const void *data = PyUnicode_DATA(text);
    unsigned previous = NOT_ASCII_SHIFT;
    long long han = 0, cjk_punct = 0, kana_hangul = 0, other_bmp = 0, two_byte = 0, astral = 0;
    long long escapes = 0, one_token = 0;
    switch (PyUnicode_KIND(text)) {
    case PyUnicode_1BYTE_KIND:
        SCAN_LOOP(Py_UCS1);
        break;
    case PyUnicode_2BYTE_KIND:
        SCAN_LOOP(Py_UCS2);
        break;
    default:
        SCAN_LOOP(Py_UCS4);
        break;
    }
    scan->counts[HAN] = han;
    scan->counts[CJK_PUNCT] = cjk_punct;
    scan->counts[KANA_HANGUL] = kana_hangul;
    scan->counts[OTHER_BMP] = other_bmp;
    scan->counts[TWO_BYTE] = two_byte;
    scan->counts[ASTRAL] = astral;
    scan->counts[JSON_ESCAPES] = escapes;
    scan->one_token_ideographs = one_token;
}

/* What estimate.py's constants and a profile's weights give for one call. */
typedef struct {
    double weights[FEATURE_COUNT];
    double split_weight;
    long long letters_free;
    long long letters_per_extra;
    const unsigned char *bitmap; /* NULL when the split weight is 0: nothing to look up */
} Settings;

/* Parses (weights, letters_free, letters_per_extra, one_token_bitmap) from args[0:4]. */
static int read_settings(PyObject *const *args, Settings *settings) {
    PyObject *weights = args[0];
    if (!PyTuple_Check(weights) || PyTuple_GET_SIZE(weights) != FEATURE_COUNT + 1) {
        PyErr_Format(PyExc_TypeError, "weights must be a tuple of %d floats", FEATURE_COUNT + 1);
        return -1;
    }
    for (int i = 0; i < FEATURE_COUNT; i++) {
        settings->weights[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(weights, i));
        if (settings->weights[i] == -1.0 && PyErr_Occurred()) return -1;
    }
    settings->split_weight = PyFloat_AsDouble(PyTuple_GET_ITEM(weights, FEATURE_COUNT));
    if (settings->split_weight == -1.0 && PyErr_Occurred()) return -1;
    settings->letters_free = PyLong_AsLongLong(args[1]);
    if (settings->letters_free == -1 && PyErr_Occurred()) return -1;
    settings->letters_per_extra = PyLong_AsLongLong(args[2]);
    if (settings->letters_per_extra == -1 && PyErr_Occurred()) return -1;
    if (settings->letters_per_extra <= 0) {
        PyErr_SetString(PyExc_ValueError, "letters_per_extra must be positive");
        return -1;
    }
    if (!PyBytes_Check(args[3]) || PyBytes_GET_SIZE(args[3]) != BITMAP_BYTES) {
        PyErr_Format(PyExc_TypeError, "one_token_bitmap must be %d bytes", BITMAP_BYTES);
        return -1;
    }
    /* Bytes are immutable and the caller holds them for the whole call. */
    settings->bitmap = settings->split_weight != 0.0 ? (const unsigned char *)PyBytes_AS_STRING(args[3]) : NULL;
    return 0;
}

/* 0, or -1 with an exception: Python 3.11 may still hold a "legacy" str, made by a deprecated C
 * API, whose code points are not laid out yet (from 3.12 on every str is). */
static int text_ready(PyObject *text) {
#if PY_VERSION_HEX < 0x030C0000
    return PyUnicode_READY(text);
#else
    (void)text;
    return 0;
#endif
}

/* Outcome of counting one message here: its tokens, or "ask the fallback", or an error. */
#define FALLBACK (-1)
#define FAILED (-2)

/* estimate.estimate of a str: 0 when empty, else estimate.weigh of its features; FAILED (with an
 * exception) only when a legacy str cannot be laid out. */
static long long estimate_text(PyObject *text, const Settings *settings) {
    if (text_ready(text) < 0) return FAILED;
    if (PyUnicode_GET_LENGTH(text) == 0) return 0;
    Scan scan;
    scan_text(text, settings->bitmap, &scan);
    double total = settings->weights[0] * (double)scan.counts[0];
    for (int i = 1; i < FEATURE_COUNT; i++) total += settings->weights[i] * (double)scan.counts[i];
    long long excess = scan.counts[LETTERS] - settings->letters_free * scan.counts[LETTER_RUNS];
    if (excess > 0) total += (double)excess / (double)settings->letters_per_extra;
    if (settings->bitmap != NULL && scan.counts[HAN]) {
        total += settings->split_weight * (double)(scan.counts[HAN] - scan.one_token_ideographs);
    }
    double rounded = ceil(total);
    return rounded < 1.0 ? 1 : (long long)rounded;
}

static PyObject *scan_features(PyObject *module, PyObject *text) {
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "features() takes a str");
        return NULL;
    }
    if (text_ready(text) < 0) return NULL;
    Scan scan;
    scan_text(text, NULL, &scan);
    PyObject *result = PyTuple_New(FEATURE_COUNT);
    if (result == NULL) return NULL;
    for (int i = 0; i < FEATURE_COUNT; i++) {
        PyObject *count = PyLong_FromLongLong(scan.counts[i]);
        if (count == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyTuple_SET_ITEM(result, i, count);
    }
    return result;
}

static PyObject *scan_estimates(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "estimates(texts, weights, letters_free, letters_per_extra, one_token_bitmap)");
        return NULL;
    }
    Settings settings;
    if (read_settings(args + 1, &settings) < 0) return NULL;
    PyObject *texts = PySequence_Tuple(args[0]); /* ours: the caller's list may change meanwhile */
    if (texts == NULL) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(texts);
    PyObject *result = PyList_New(count);
    if (result == NULL) goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *text = PyTuple_GET_ITEM(texts, i);
        if (!PyUnicode_Check(text)) {
            PyErr_Format(PyExc_TypeError, "estimates() takes str texts, not %.100s", Py_TYPE(text)->tp_name);
            goto fail;
        }
        long long estimate = estimate_text(text, &settings);
        if (estimate == FAILED) goto fail;
        PyObject *tokens = PyLong_FromLongLong(estimate);
        if (tokens == NULL) goto fail;
        PyList_SET_ITEM(result, i, tokens);
    }
    Py_DECREF(texts);
    return result;
fail:
    Py_DECREF(texts);
    Py_XDECREF(result);
    return NULL;
}

/* ---- first_sight: each message's tokens, as messages.each_message_tokens counts them ---- */

/* Message kinds of messages._message_kind. */
enum { KIND_PLAIN = 1, KIND_AI = 2, KIND_TOOL = 3 };

typedef struct {
    Settings settings;
    long long message_overhead, name_overhead, tool_call_overhead;
    PyObject *provider_json; /* borrowed from the call's arguments */
} Walk;

/* Interned key names of a tool call and of additional_kwargs, created at module import. */
static PyObject *s_name, *s_tool_calls, *s_args, *s_id, *s_function_call;

/* Where message_memo.message_fields puts each field: class, content, name, then tool_call_id
 * (a tool message) or tool_calls, invalid_tool_calls, additional_kwargs (an AI message). */
enum { FIELD_CLASS, FIELD_CONTENT, FIELD_NAME, FIELD_TOOL_CALL_ID = 3, FIELD_TOOL_CALLS = 3,
       FIELD_INVALID_TOOL_CALLS, FIELD_ADDITIONAL_KWARGS };
#define PLAIN_FIELDS 3
#define TOOL_FIELDS 4
#define AI_FIELDS 6

/* Tokens of an optional str field (None or "" cost nothing); FALLBACK for any other type. */
static long long optional_text_tokens(PyObject *value, const Settings *settings, long long overhead) {
    if (value == Py_None) return 0;
    if (!PyUnicode_CheckExact(value)) return FALLBACK;
    if (text_ready(value) < 0) return FAILED;
    if (PyUnicode_GET_LENGTH(value) == 0) return 0;
    long long tokens = estimate_text(value, settings);
    return tokens < 0 ? tokens : overhead + tokens;
}

/* One logical tool call of `tool_calls`: overhead, name, and the arguments as the provider's JSON
 * (a str is used as it is). */
static long long tool_call_tokens(PyObject *call, const Walk *walk) {
    if (!PyDict_CheckExact(call)) return FALLBACK;
    PyObject *arguments = PyDict_GetItemWithError(call, s_args);
    if (arguments == NULL) return PyErr_Occurred() ? FAILED : FALLBACK;
    Py_INCREF(arguments);
    PyObject *json = PyUnicode_Check(arguments) /* a str is used as it is, as isinstance does */
                         ? (Py_INCREF(arguments), arguments)
                         : PyObject_CallOneArg(walk->provider_json, arguments);
    Py_DECREF(arguments);
    if (json == NULL) return FAILED;
    if (!PyUnicode_Check(json)) {
        Py_DECREF(json);
        PyErr_SetString(PyExc_TypeError, "provider_json must return a str");
        return FAILED;
    }
    long long tokens = estimate_text(json, &walk->settings);
    Py_DECREF(json);
    if (tokens < 0) return tokens;
    tokens += walk->tool_call_overhead;
    /* Read after provider_json, which could (in theory) have changed the call. */
    PyObject *name = PyDict_GetItemWithError(call, s_name);
    if (name == NULL) return PyErr_Occurred() ? FAILED : FALLBACK;
    if (!PyUnicode_CheckExact(name)) return FALLBACK;
    long long name_tokens = estimate_text(name, &walk->settings);
    return name_tokens < 0 ? name_tokens : tokens + name_tokens;
}

/* True when the provider-format `additional_kwargs["tool_calls"]` mirrors the list `calls` one to
 * one by id (messages._provider_calls_duplicate), so it costs nothing more; -1 on error. Both lists
 * are re-checked for length at every step: an id's __eq__ could change them. */
static int provider_calls_mirror(PyObject *raw_calls, PyObject *calls) {
    if (!PyList_CheckExact(raw_calls) || PyList_GET_SIZE(raw_calls) != PyList_GET_SIZE(calls)) return 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(calls); i++) {
        if (i >= PyList_GET_SIZE(raw_calls)) return 0;
        PyObject *raw = PyList_GET_ITEM(raw_calls, i);
        PyObject *call = PyList_GET_ITEM(calls, i);
        if (!PyDict_CheckExact(raw) || !PyDict_CheckExact(call)) return 0;
        Py_INCREF(raw);
        Py_INCREF(call);
        PyObject *call_id = PyDict_GetItemWithError(call, s_id);
        PyObject *raw_id = call_id == NULL ? NULL : PyDict_GetItemWithError(raw, s_id);
        int equal = 0;
        if (call_id != NULL && call_id != Py_None && raw_id != NULL) {
            Py_INCREF(call_id);
            Py_INCREF(raw_id);
            equal = PyObject_RichCompareBool(raw_id, call_id, Py_EQ);
            Py_DECREF(call_id);
            Py_DECREF(raw_id);
        }
        Py_DECREF(raw);
        Py_DECREF(call);
        if (PyErr_Occurred()) return -1;
        if (equal != 1) return 0;
    }
    return 1;
}

/* The tool calls of an AI message (its fields tuple) with no invalid calls; FALLBACK for anything
 * unusual. */
static long long ai_calls_tokens(PyObject *fields, const Walk *walk) {
    PyObject *tool_calls = PyTuple_GET_ITEM(fields, FIELD_TOOL_CALLS);
    PyObject *invalid = PyTuple_GET_ITEM(fields, FIELD_INVALID_TOOL_CALLS);
    PyObject *extra = PyTuple_GET_ITEM(fields, FIELD_ADDITIONAL_KWARGS);
    if (!PyList_CheckExact(tool_calls) || !PyList_CheckExact(invalid) || PyList_GET_SIZE(invalid) != 0 ||
        !PyDict_CheckExact(extra)) {
        return FALLBACK;
    }
    long long total = FALLBACK;
    /* The fields tuple holds the list; each call is held while it is read (Python code may run:
     * an id's __eq__, the JSON of the arguments), and the list's length is read again each time. */
    Py_INCREF(tool_calls);
    Py_INCREF(extra);
    if (PyDict_GET_SIZE(extra) != 0) {
        /* A legacy function call, or provider calls that are not a mirror: the general path. */
        int has_function_call = PyDict_Contains(extra, s_function_call);
        if (has_function_call < 0) goto failed;
        if (has_function_call) goto done;
        PyObject *raw_calls = PyDict_GetItemWithError(extra, s_tool_calls);
        if (raw_calls == NULL && PyErr_Occurred()) goto failed;
        if (raw_calls != NULL && raw_calls != Py_None) {
            Py_INCREF(raw_calls);
            int mirror = provider_calls_mirror(raw_calls, tool_calls);
            Py_DECREF(raw_calls);
            if (mirror < 0) goto failed;
            if (!mirror) goto done;
        }
    }
    total = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tool_calls); i++) {
        PyObject *call = PyList_GET_ITEM(tool_calls, i);
        Py_INCREF(call);
        long long tokens = tool_call_tokens(call, walk);
        Py_DECREF(call);
        if (tokens < 0) {
            total = tokens;
            goto done;
        }
        total += tokens;
    }
    goto done;
failed:
    total = FAILED;
done:
    Py_DECREF(tool_calls);
    Py_DECREF(extra);
    return total;
}

/* One message of a known kind with the common shape, from its fields tuple (which the caller
 * holds); FALLBACK for any other shape. */
static long long message_tokens_here(PyObject *fields, long kind, const Walk *walk) {
    Py_ssize_t size = PyTuple_GET_SIZE(fields);
    if (size != (kind == KIND_AI ? AI_FIELDS : kind == KIND_TOOL ? TOOL_FIELDS : PLAIN_FIELDS)) return FALLBACK;
    PyObject *content = PyTuple_GET_ITEM(fields, FIELD_CONTENT);
    if (!PyUnicode_CheckExact(content)) return FALLBACK;
    long long total = estimate_text(content, &walk->settings);
    if (total < 0) return total;
    total += walk->message_overhead;
    long long part = optional_text_tokens(PyTuple_GET_ITEM(fields, FIELD_NAME), &walk->settings, walk->name_overhead);
    if (part < 0) return part;
    total += part;
    if (kind == KIND_TOOL) {
        PyObject *tool_call_id = PyTuple_GET_ITEM(fields, FIELD_TOOL_CALL_ID);
        part = PyUnicode_CheckExact(tool_call_id) ? estimate_text(tool_call_id, &walk->settings) : FALLBACK;
    } else if (kind == KIND_AI) {
        part = ai_calls_tokens(fields, walk);
    } else {
        part = 0;
    }
    return part < 0 ? part : total + part;
}

static PyObject *scan_first_sight(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError,
                        "first_sight(messages, fields, weights, letters_free, letters_per_extra, "
                        "one_token_bitmap, kinds, overheads, provider_json, fallback)");
        return NULL;
    }
    Walk walk;
    if (read_settings(args + 2, &walk.settings) < 0) return NULL;
    PyObject *kinds = args[6], *overheads = args[7], *fallback = args[9];
    walk.provider_json = args[8];
    if (!PyDict_Check(kinds)) {
        PyErr_SetString(PyExc_TypeError, "kinds must be a dict of message class to kind");
        return NULL;
    }
    if (!PyTuple_Check(overheads) || PyTuple_GET_SIZE(overheads) != 3) {
        PyErr_SetString(PyExc_TypeError, "overheads must be (message, name, tool call)");
        return NULL;
    }
    walk.message_overhead = PyLong_AsLongLong(PyTuple_GET_ITEM(overheads, 0));
    walk.name_overhead = PyLong_AsLongLong(PyTuple_GET_ITEM(overheads, 1));
    walk.tool_call_overhead = PyLong_AsLongLong(PyTuple_GET_ITEM(overheads, 2));
    if (PyErr_Occurred()) return NULL;

    PyObject *result = NULL;
    PyObject *messages = PySequence_Tuple(args[0]);
    if (messages == NULL) return NULL;
    PyObject *all_fields = PySequence_Tuple(args[1]);
    if (all_fields == NULL) {
        Py_DECREF(messages);
        return NULL;
    }
    Py_INCREF(kinds); /* the fallback may run any Python code: keep what we read alive */
    Py_ssize_t count = PyTuple_GET_SIZE(messages);
    if (PyTuple_GET_SIZE(all_fields) != count) {
        PyErr_SetString(PyExc_ValueError, "messages and fields differ in length");
        goto fail;
    }
    result = PyList_New(count);
    if (result == NULL) goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *message = PyTuple_GET_ITEM(messages, i);
        PyObject *fields = PyTuple_GET_ITEM(all_fields, i);
        long long tokens = FALLBACK;
        if (PyTuple_CheckExact(fields) && PyTuple_GET_SIZE(fields) >= PLAIN_FIELDS &&
            PyTuple_GET_ITEM(fields, FIELD_CLASS) == (PyObject *)Py_TYPE(message)) {
            PyObject *kind = PyDict_GetItemWithError(kinds, (PyObject *)Py_TYPE(message));
            if (kind == NULL && PyErr_Occurred()) goto fail;
            if (kind != NULL) {
                long kind_value = PyLong_AsLong(kind);
                if (kind_value == -1 && PyErr_Occurred()) goto fail;
                tokens = message_tokens_here(fields, kind_value, &walk);
                if (tokens == FAILED) goto fail;
            }
        }
        PyObject *item;
        if (tokens == FALLBACK) { /* a shape (or class) not read here: Python's own count */
            item = PyObject_CallOneArg(fallback, message);
            if (item != NULL && !PyLong_Check(item)) {
                Py_DECREF(item);
                PyErr_SetString(PyExc_TypeError, "fallback must return an int");
                item = NULL;
            }
        } else {
            item = PyLong_FromLongLong(tokens);
        }
        if (item == NULL) goto fail;
        PyList_SET_ITEM(result, i, item);
    }
    Py_DECREF(kinds);
    Py_DECREF(messages);
    Py_DECREF(all_fields);
    return result;
fail:
    Py_DECREF(kinds);
    Py_DECREF(messages);
    Py_DECREF(all_fields);
    Py_XDECREF(result);
    return NULL;
}

static PyMethodDef scan_methods[] = {
    {"features", scan_features, METH_O, "features.text_features of one str."},
    {"estimates", (PyCFunction)(void (*)(void))scan_estimates, METH_FASTCALL,
     "estimate.weigh of each text's features under one profile's settings."},
    {"first_sight", (PyCFunction)(void (*)(void))scan_first_sight, METH_FASTCALL,
     "messages.each_message_tokens of a thread's messages, common shapes walked in C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT, "_scan", "The token estimate's scan in C (optional; see features.py).", -1,
    scan_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) {
    init_ascii_shift();
#define INTERN(variable, text) \
    if ((variable) == NULL && ((variable) = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_name, "name");
    INTERN(s_tool_calls, "tool_calls");
    INTERN(s_args, "args");
    INTERN(s_id, "id");
    INTERN(s_function_call, "function_call");
#undef INTERN
    return PyModule_Create(&scan_module);
}
