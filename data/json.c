// data/json.c: see json.h.
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../utils.h"

Json json_reader(const uint8_t *file, size_t n, size_t at, const char *name, char *err, size_t err_len) {
    return (Json){file + at, file, file + n, name, err, err_len};
}

// the message of json_fail, giving the offset of at (j->p, or where the piece at fault began)
static void report(const Json *j, const uint8_t *at, const char *fmt, va_list ap) {
    char what[512];
    vsnprintf(what, sizeof(what), fmt, ap);
    size_t offset = (size_t)(at - j->start);
    if (j->name) fail_with(j->err, j->err_len, "%s: at byte %zu: %s", j->name, offset, what);
    else fail_with(j->err, j->err_len, "at byte %zu: %s", offset, what);
}

int json_fail(const Json *j, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(j, j->p, fmt, ap);
    va_end(ap);
    return -1;
}

static int json_fail_at(const Json *j, const uint8_t *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int json_fail_at(const Json *j, const uint8_t *at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(j, at, fmt, ap);
    va_end(ap);
    return -1;
}

int json_peek(Json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
    return j->p < j->end ? *j->p : -1;
}

// a byte for a message: itself when printable ASCII, else '?' (the offset locates it)
static int shown(int c) { return c >= 0x20 && c < 0x7F ? c : '?'; }

int json_expect(Json *j, char c) {
    int next = json_peek(j);
    if (next == (uint8_t)c) {
        j->p++;
        return 0;
    }
    if (next < 0) return json_fail(j, "expected '%c', found the end", c);
    return json_fail(j, "expected '%c', found '%c'", c, shown(next));
}

int json_next(Json *j, char close, size_t i) {
    int next = json_peek(j);
    if (next == (uint8_t)close) {
        j->p++;
        return 0;
    }
    if (i == 0) return 1;
    if (next == ',') {
        j->p++;
        return 1;
    }
    if (next < 0) return json_fail(j, "expected ',' or '%c', found the end", close);
    return json_fail(j, "expected ',' or '%c', found '%c'", close, shown(next));
}

int json_key(Json *j, ByteBuf *key) {
    if (json_peek(j) != '"') return json_fail(j, "expected a key (a string)");
    if (json_string(j, key)) return -1;
    return json_expect(j, ':');
}

// ---- strings ----------------------------------------------------------------------------

int utf8_decode(const uint8_t *p, const uint8_t *end, uint32_t *cp) {
    size_t avail = (size_t)(end - p);
    if (avail == 0) return 0;
    uint8_t b = p[0];
    if (b < 0x80) { *cp = b; return 1; }
    int len;
    uint32_t c, min;
    if ((b & 0xE0) == 0xC0) { len = 2; c = b & 0x1F; min = 0x80; }
    else if ((b & 0xF0) == 0xE0) { len = 3; c = b & 0x0F; min = 0x800; }
    else if ((b & 0xF8) == 0xF0) { len = 4; c = b & 0x07; min = 0x10000; }
    else return 0;
    if (avail < (size_t)len) return 0;
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (p[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c < 0xE000)) return 0;   // overlong, too big, surrogate
    *cp = c;
    return len;
}

static void utf8_append(ByteBuf *out, uint32_t cp) {
    uint8_t u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (uint8_t)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (uint8_t)(0xC0 | cp >> 6); u[1] = (uint8_t)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (uint8_t)(0xE0 | cp >> 12); u[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        u[2] = (uint8_t)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        u[0] = (uint8_t)(0xF0 | cp >> 18); u[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
        u[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)); u[3] = (uint8_t)(0x80 | (cp & 0x3F)); n = 4;
    }
    bytebuf_append(out, u, n);
}

// the 4 hex digits of a \u escape (j->p just after the 'u'); -1: not 4 hex digits
static int hex4(Json *j, uint32_t *v) {
    if (j->end - j->p < 4) return -1;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = j->p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    j->p += 4;
    return 0;
}

// A \u escape (j->p at its backslash): returns its code point, or -1. A UTF-16 surrogate pair,
// written as two escapes, spells one character beyond U+FFFF; either half alone spells none.
static long unicode_escape(Json *j) {
    const uint8_t *at = j->p;
    uint32_t cp, low;
    j->p += 2;   // "\u"
    if (hex4(j, &cp)) return json_fail_at(j, at, "a \\u escape needs 4 hex digits");
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return json_fail_at(j, at, "lone surrogate \\u%04X (a low half with no high half before it)", cp);
    if (cp < 0xD800 || cp > 0xDBFF) return cp;
    if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
        return json_fail_at(j, at, "lone surrogate \\u%04X (a high half with no \\u low half after it)", cp);
    j->p += 2;
    if (hex4(j, &low)) return json_fail_at(j, j->p - 2, "a \\u escape needs 4 hex digits");
    if (low < 0xDC00 || low > 0xDFFF)
        return json_fail_at(j, at, "lone surrogate \\u%04X (followed by \\u%04X, not a low half)", cp, low);
    return 0x10000 + ((long)(cp - 0xD800) << 10) + (low - 0xDC00);
}

int json_string(Json *j, ByteBuf *out) {
    if (out) out->len = 0;
    if (json_expect(j, '"')) return -1;
    const uint8_t *open = j->p - 1;
    for (;;) {
        if (j->p >= j->end) return json_fail_at(j, open, "unterminated string (no closing quote)");
        uint8_t c = *j->p;
        if (c == '"') {
            j->p++;
            if (out) {   // a NUL after the bytes, not counted: a string without \u0000 is a C string
                bytebuf_append(out, "", 1);
                out->len--;
            }
            return 0;
        }
        if (c < 0x20) return json_fail(j, "control byte 0x%02X in a string (JSON writes it as an escape)", c);
        if (c != '\\') {
            uint32_t cp;
            int n = utf8_decode(j->p, j->end, &cp);
            if (!n) return json_fail(j, "invalid UTF-8 (byte 0x%02X) in a string", c);
            if (out) bytebuf_append(out, j->p, (size_t)n);
            j->p += n;
            continue;
        }
        if (j->end - j->p < 2) return json_fail_at(j, open, "unterminated string (no closing quote)");
        static const char escapes[] = "\"\\/bfnrt", decoded[] = "\"\\/\b\f\n\r\t";
        uint8_t e = j->p[1];
        const char *simple = e ? strchr(escapes, e) : NULL;
        if (simple) {
            if (out) bytebuf_append(out, &decoded[simple - escapes], 1);
            j->p += 2;
        } else if (e == 'u') {
            long cp = unicode_escape(j);
            if (cp < 0) return -1;
            if (out) utf8_append(out, (uint32_t)cp);
        } else {
            return json_fail(j, "unknown escape \\%c in a string", shown(e));
        }
    }
}

int json_string_is(const ByteBuf *s, const char *text) {
    size_t n = strlen(text);
    return s->len == n && (n == 0 || memcmp(s->data, text, n) == 0);
}

// ---- numbers and other values -------------------------------------------------------------

static int is_digit(const Json *j) { return j->p < j->end && *j->p >= '0' && *j->p <= '9'; }

// a number (j->p at its first byte); *integer: it has no fraction and no exponent
static int number(Json *j, int *integer) {
    if (j->p < j->end && *j->p == '-') j->p++;
    if (!is_digit(j)) return json_fail(j, "expected a value");
    if (*j->p == '0') j->p++;   // a leading zero is the whole integer part: 007 is not JSON
    else while (is_digit(j)) j->p++;
    *integer = 1;
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (!is_digit(j)) return json_fail(j, "a number needs digits after its '.'");
        while (is_digit(j)) j->p++;
        *integer = 0;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        if (!is_digit(j)) return json_fail(j, "a number needs digits in its exponent");
        while (is_digit(j)) j->p++;
        *integer = 0;
    }
    return 0;
}

int json_uint(Json *j, const char *what, uint64_t lo, uint64_t hi, uint64_t *v) {
    int c = json_peek(j), integer;
    if (c != '-' && !(c >= '0' && c <= '9')) return json_fail(j, "%s must be an integer", what);
    const uint8_t *start = j->p;
    if (number(j, &integer)) return -1;
    int len = (int)(j->p - start) < 40 ? (int)(j->p - start) : 40;
    if (!integer) return json_fail_at(j, start, "%s: %.*s is not an integer", what, len, (const char *)start);
    int out_of_range = c == '-' && start[1] != '0';   // every negative but -0 (no leading zeros)
    uint64_t x = 0;
    for (const uint8_t *q = start + (c == '-'); q < j->p && !out_of_range; q++) {
        if (x > (UINT64_MAX - (uint64_t)(*q - '0')) / 10) out_of_range = 1;
        else x = x * 10 + (uint64_t)(*q - '0');
    }
    if (out_of_range || x < lo || x > hi)
        return json_fail_at(j, start, "%s: %.*s is out of range [%llu, %llu]", what, len, (const char *)start,
                            (unsigned long long)lo, (unsigned long long)hi);
    *v = x;
    return 0;
}

static int literal(Json *j, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0) return json_fail(j, "expected a value");
    j->p += n;
    return 0;
}

static int skip(Json *j, int depth) {
    if (depth > JSON_MAX_DEPTH) return json_fail(j, "nested deeper than %d", JSON_MAX_DEPTH);
    int c = json_peek(j), integer, more;
    switch (c) {
        case -1: return json_fail(j, "expected a value, found the end");
        case '"': return json_string(j, NULL);
        case 't': return literal(j, "true");
        case 'f': return literal(j, "false");
        case 'n': return literal(j, "null");
        case '{':
        case '[': {
            char close = c == '{' ? '}' : ']';
            j->p++;
            for (size_t i = 0; (more = json_next(j, close, i)) > 0; i++)
                if ((c == '{' && json_key(j, NULL)) || skip(j, depth + 1)) return -1;
            return more;
        }
        default: return number(j, &integer);
    }
}

int json_skip(Json *j) { return skip(j, 1); }

int json_end(Json *j) {
    int next = json_peek(j);
    if (next >= 0) return json_fail(j, "text after the JSON value ('%c')", shown(next));
    return 0;
}
