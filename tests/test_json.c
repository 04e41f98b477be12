// tests/test_json.c: data/json.c, the JSON reader of encoder.json, the safetensors header and
// config.json: what it decodes, what it refuses and the exact message of each refusal (file,
// byte offset, problem), every code point through a \u escape, and deep nesting.
#include <string.h>

#include "../data/json.h"
#include "test.h"

#define NAME "t.json"

// text[0, n) as one string; ok: it parses
static int read_string(const char *text, size_t n, ByteBuf *out, char *err, size_t cap) {
    Json j = json_reader((const uint8_t *)text, n, 0, NAME, err, cap);
    err[0] = 0;
    return json_string(&j, out) == 0 && json_end(&j) == 0;
}

static void test_strings(void) {
    struct { const char *json, *bytes; size_t len; } good[] = {
        {"\"\"", "", 0},
        {"\"plain ascii\"", "plain ascii", 11},
        {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\/\b\f\n\r\t", 8},
        {"\"\\u0041\\u00e9\\u20AC\"", "A\xC3\xA9\xE2\x82\xAC", 6},
        {"\"\\uD83D\\uDE00\"", "\xF0\x9F\x98\x80", 4},                 // a surrogate pair: U+1F600
        {"\"\\udbff\\udfff\"", "\xF4\x8F\xBF\xBF", 4},                 // U+10FFFF, lower-case hex
        {"\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"", "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", 9},   // raw UTF-8
        {"\"\xEF\xBF\xBF\xF4\x8F\xBF\xBF\"", "\xEF\xBF\xBF\xF4\x8F\xBF\xBF", 7},   // U+FFFF, U+10FFFF raw
        {"\"a\\u0000b\"", "a\0b", 3},                                  // a NUL, counted in the length
        {"  \"x\" \n\t\r", "x", 1},                                    // whitespace around
    };
    char err[256];
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        ByteBuf out = {0};
        int ok = read_string(good[i].json, strlen(good[i].json), &out, err, sizeof(err));
        CHECK(ok && out.len == good[i].len && memcmp(out.data, good[i].bytes, out.len) == 0 && out.data[out.len] == 0,
              "string %zu (%s) decodes to its %zu bytes, NUL-terminated: %s", i, good[i].json, good[i].len, err);
        bytebuf_free(&out);
    }

    // each refusal, whole: the file, the offset of the byte at fault (a string's opening quote
    // when it never ends, an escape's backslash) and the problem
    struct { const char *json, *message; } bad[] = {
        {"\"abc", "t.json: at byte 0: unterminated string (no closing quote)"},
        {" \"a\\", "t.json: at byte 1: unterminated string (no closing quote)"},
        {"\"a\\x\"", "t.json: at byte 2: unknown escape \\x in a string"},
        {"\"a\\U0041\"", "t.json: at byte 2: unknown escape \\U in a string"},
        {"\"a\\u12\"", "t.json: at byte 2: a \\u escape needs 4 hex digits"},
        {"\"\\u12G4\"", "t.json: at byte 1: a \\u escape needs 4 hex digits"},
        {"\"\\uDC00\"", "t.json: at byte 1: lone surrogate \\uDC00 (a low half with no high half before it)"},
        {"\"x\\uD800\"", "t.json: at byte 2: lone surrogate \\uD800 (a high half with no \\u low half after it)"},
        {"\"\\uD800\\n\"", "t.json: at byte 1: lone surrogate \\uD800 (a high half with no \\u low half after it)"},
        {"\"\\uD800\\u0041\"", "t.json: at byte 1: lone surrogate \\uD800 (followed by \\u0041, not a low half)"},
        {"\"\\uDBFF\\uDBFF\"", "t.json: at byte 1: lone surrogate \\uDBFF (followed by \\uDBFF, not a low half)"},
        {"\"\\uD800\\uDC0\"", "t.json: at byte 7: a \\u escape needs 4 hex digits"},
        {"\"a\x01\"", "t.json: at byte 2: control byte 0x01 in a string (JSON writes it as an escape)"},
        {"\"tab\there\"", "t.json: at byte 4: control byte 0x09 in a string (JSON writes it as an escape)"},
        {"\"\xFF\"", "t.json: at byte 1: invalid UTF-8 (byte 0xFF) in a string"},
        {"\"ok\x80\"", "t.json: at byte 3: invalid UTF-8 (byte 0x80) in a string"},            // lone continuation
        {"\"\xC0\xAF\"", "t.json: at byte 1: invalid UTF-8 (byte 0xC0) in a string"},          // overlong '/'
        {"\"\xE0\x80\xAF\"", "t.json: at byte 1: invalid UTF-8 (byte 0xE0) in a string"},      // overlong, 3 bytes
        {"\"\xED\xA0\x80\"", "t.json: at byte 1: invalid UTF-8 (byte 0xED) in a string"},      // U+D800 encoded
        {"\"\xF4\x90\x80\x80\"", "t.json: at byte 1: invalid UTF-8 (byte 0xF4) in a string"},  // past U+10FFFF
        {"\"\xE2\x82\"", "t.json: at byte 1: invalid UTF-8 (byte 0xE2) in a string"},          // cut short
        {"'single'", "t.json: at byte 0: expected '\"', found '''"},
        {"", "t.json: at byte 0: expected '\"', found the end"},
        {"\"a\" \"b\"", "t.json: at byte 4: text after the JSON value ('\"')"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ByteBuf out = {0};
        int ok = read_string(bad[i].json, strlen(bad[i].json), &out, err, sizeof(err));
        CHECK(!ok && strcmp(err, bad[i].message) == 0, "string %zu is refused with\n  %s\ngot\n  %s", i,
              bad[i].message, err);
        // only checking (out NULL) refuses the same, with the same message
        char err2[256];
        Json j = json_reader((const uint8_t *)bad[i].json, strlen(bad[i].json), 0, NAME, err2, sizeof(err2));
        ok = json_string(&j, NULL) == 0 && json_end(&j) == 0;
        CHECK(!ok && strcmp(err2, err) == 0, "string %zu, only checked: %s", i, err2);
        bytebuf_free(&out);
    }

    ByteBuf s = {0};
    bytebuf_append(&s, "a\0b", 3);
    CHECK(json_string_is(&s, "a\0b") == 0 && json_string_is(&s, "a") == 0, "a string with a NUL equals no C string");
    s.len = 1;
    CHECK(json_string_is(&s, "a") && !json_string_is(&s, "ab") && !json_string_is(&s, ""), "json_string_is");
    s.len = 0;
    CHECK(json_string_is(&s, "") && !json_string_is(&s, "a"), "the empty string");
    bytebuf_free(&s);
}

// every code point but the surrogates, written as a \u escape (a pair past U+FFFF), decodes to
// UTF-8 that utf8_decode reads back as that code point, in one character
static void test_every_code_point(void) {
    size_t wrong = 0, first_wrong = 0;
    char err[256], text[32];
    ByteBuf out = {0};
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp == 0xD800) cp = 0xE000;
        int n = cp < 0x10000 ? snprintf(text, sizeof(text), "\"\\u%04X\"", cp)
                             : snprintf(text, sizeof(text), "\"\\u%04X\\u%04x\"", 0xD800 + ((cp - 0x10000) >> 10),
                                        0xDC00 + ((cp - 0x10000) & 0x3FF));
        uint32_t back = 0;
        int ok = read_string(text, (size_t)n, &out, err, sizeof(err)) &&
                 utf8_decode(out.data, out.data + out.len, &back) == (int)out.len && back == cp &&
                 out.len == (size_t)(cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4);
        if (!ok && wrong++ == 0) first_wrong = cp;
    }
    CHECK(wrong == 0, "every code point through a \\u escape and back: %zu wrong, the first U+%04zX", wrong, first_wrong);
    bytebuf_free(&out);
}

// one integer, then the end
static int read_uint(const char *text, uint64_t lo, uint64_t hi, uint64_t *v, char *err, size_t cap) {
    Json j = json_reader((const uint8_t *)text, strlen(text), 0, NAME, err, cap);
    err[0] = 0;
    return json_uint(&j, "n", lo, hi, v) == 0 && json_end(&j) == 0;
}

static void test_numbers(void) {
    struct { const char *json; uint64_t value; } good[] = {
        {"0", 0}, {"-0", 0}, {" 7 ", 7}, {"123456789", 123456789}, {"18446744073709551615", UINT64_MAX},
    };
    char err[256];
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        uint64_t v = 1;
        CHECK(read_uint(good[i].json, 0, UINT64_MAX, &v, err, sizeof(err)) && v == good[i].value,
              "integer '%s' reads as %llu: %s", good[i].json, (unsigned long long)good[i].value, err);
    }
    struct { const char *json; uint64_t lo, hi; const char *message; } bad[] = {
        {"-1", 0, 9, "t.json: at byte 0: n: -1 is out of range [0, 9]"},
        {"-9", 0, 9, "t.json: at byte 0: n: -9 is out of range [0, 9]"},
        {"-12", 0, 99, "t.json: at byte 0: n: -12 is out of range [0, 99]"},
        {"10", 0, 9, "t.json: at byte 0: n: 10 is out of range [0, 9]"},
        {"0", 1, 9, "t.json: at byte 0: n: 0 is out of range [1, 9]"},
        {"18446744073709551616", 0, UINT64_MAX,
         "t.json: at byte 0: n: 18446744073709551616 is out of range [0, 18446744073709551615]"},
        {"007", 0, 9, "t.json: at byte 1: text after the JSON value ('0')"},   // no leading zeros
        {"1.5", 0, 9, "t.json: at byte 0: n: 1.5 is not an integer"},
        {"1.0", 0, 9, "t.json: at byte 0: n: 1.0 is not an integer"},
        {"2e3", 0, 9999, "t.json: at byte 0: n: 2e3 is not an integer"},
        {"1.", 0, 9, "t.json: at byte 2: a number needs digits after its '.'"},
        {"1e+", 0, 9, "t.json: at byte 3: a number needs digits in its exponent"},
        {"-", 0, 9, "t.json: at byte 1: expected a value"},
        {"+1", 0, 9, "t.json: at byte 0: n must be an integer"},
        {"\"1\"", 0, 9, "t.json: at byte 0: n must be an integer"},
        {"", 0, 9, "t.json: at byte 0: n must be an integer"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v;
        int ok = read_uint(bad[i].json, bad[i].lo, bad[i].hi, &v, err, sizeof(err));
        CHECK(!ok && strcmp(err, bad[i].message) == 0, "integer '%s' is refused with\n  %s\ngot\n  %s", bad[i].json,
              bad[i].message, err);
    }
}

// one value skipped, then the end
static int skip_value(const char *text, char *err, size_t cap) {
    Json j = json_reader((const uint8_t *)text, strlen(text), 0, NAME, err, cap);
    err[0] = 0;
    return json_skip(&j) == 0 && json_end(&j) == 0;
}

static void test_values(void) {
    char err[256];
    const char *good[] = {
        "{}", "[]", "{ }", "[ ]", "true", "false", "null", "-0.5e-7", "\"s\"",
        "{\"a\": [1, -2.5E+3, true, false, null, \"x\", {}, []], \"b\": {\"c\": \"\\u00e9\"}, \"a\": 0}",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        CHECK(skip_value(good[i], err, sizeof(err)), "value '%s' is checked and skipped: %s", good[i], err);
    // the grammar of skipped values is checked all the same
    struct { const char *json, *message; } bad[] = {
        {"[1,]", "t.json: at byte 3: expected a value"},
        {"[1 2]", "t.json: at byte 3: expected ',' or ']', found '2'"},
        {"{\"a\" 1}", "t.json: at byte 5: expected ':', found '1'"},
        {"{\"a\": 1 \"b\": 2}", "t.json: at byte 8: expected ',' or '}', found '\"'"},
        {"{\"a\": 1,}", "t.json: at byte 8: expected a key (a string)"},
        {"{1: 2}", "t.json: at byte 1: expected a key (a string)"},
        {"{\"a\": 1", "t.json: at byte 7: expected ',' or '}', found the end"},
        {"[tru]", "t.json: at byte 1: expected a value"},
        {"nul", "t.json: at byte 0: expected a value"},
        {"[01]", "t.json: at byte 2: expected ',' or ']', found '1'"},
        {"[\"\\uD800\"]", "t.json: at byte 2: lone surrogate \\uD800 (a high half with no \\u low half after it)"},
        {"{\"\xFF\": 1}", "t.json: at byte 2: invalid UTF-8 (byte 0xFF) in a string"},
        {"", "t.json: at byte 0: expected a value, found the end"},
        {"{} {}", "t.json: at byte 3: text after the JSON value ('{')"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int ok = skip_value(bad[i].json, err, sizeof(err));
        CHECK(!ok && strcmp(err, bad[i].message) == 0, "value '%s' is refused with\n  %s\ngot\n  %s", bad[i].json,
              bad[i].message, err);
    }

    // nesting: JSON_MAX_DEPTH levels are read, one more is refused (and no deeper recursion happens)
    char deep[2 * (JSON_MAX_DEPTH + 1) + 1];
    for (int depth = JSON_MAX_DEPTH; depth <= JSON_MAX_DEPTH + 1; depth++) {
        memset(deep, '[', (size_t)depth);
        memset(deep + depth, ']', (size_t)depth);
        deep[2 * depth] = 0;
        int ok = skip_value(deep, err, sizeof(err));
        char expect[64];
        snprintf(expect, sizeof(expect), "t.json: at byte %d: nested deeper than %d", JSON_MAX_DEPTH, JSON_MAX_DEPTH);
        CHECK(depth == JSON_MAX_DEPTH ? ok : !ok && strcmp(err, expect) == 0, "%d nested arrays: %s", depth,
              ok ? "read" : err);
    }
}

// an object read key by key, as the callers do; the JSON after a binary prefix, unnamed
static void test_objects(void) {
    static const uint8_t file[] = "\x05\0\0\0\0\0\0\0{\"x\": 1, \"yy\": [2, 3]}  ";
    char err[256] = "";
    Json j = json_reader(file, sizeof(file) - 1, 8, NULL, err, sizeof(err));
    ByteBuf key = {0};
    uint64_t x = 0, y[2] = {0, 0};
    int more = -1, keys = 0, ok = json_expect(&j, '{') == 0;
    for (size_t i = 0; ok && (more = json_next(&j, '}', i)) > 0; i++, keys++) {
        ok = json_key(&j, &key) == 0;
        if (ok && json_string_is(&key, "x")) ok = json_uint(&j, "x", 0, 9, &x) == 0;
        else if (ok && json_string_is(&key, "yy")) {
            int items = -1;
            ok = json_expect(&j, '[') == 0;
            for (size_t k = 0; ok && (items = json_next(&j, ']', k)) > 0; k++)
                ok = k < 2 && json_uint(&j, "y", 0, 9, &y[k]) == 0;
            ok = ok && items == 0;
        }
    }
    ok = ok && more == 0 && json_end(&j) == 0;
    CHECK(ok && keys == 2 && x == 1 && y[0] == 2 && y[1] == 3, "an object read key by key: %s", err);

    // offsets count from byte 0 of the file, past the prefix; no name: the caller gives it
    static const uint8_t broken[] = "\x05\0\0\0\0\0\0\0{\"x\": 1,, }";
    j = json_reader(broken, sizeof(broken) - 1, 8, NULL, err, sizeof(err));
    ok = json_expect(&j, '{') == 0;
    for (size_t i = 0; ok && (more = json_next(&j, '}', i)) > 0; i++)
        ok = json_key(&j, &key) == 0 && json_uint(&j, "x", 0, 9, &x) == 0;
    CHECK(!ok && strcmp(err, "at byte 16: expected a key (a string)") == 0,
          "an unnamed reader's message, offset in file bytes: %s", err);
    bytebuf_free(&key);
}

int main(void) {
    test_strings();
    test_every_code_point();
    test_numbers();
    test_values();
    test_objects();
    return test_summary();
}
