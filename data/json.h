// data/json.h: the one JSON reader (RFC 8259) of the project, for the files it reads that are
// JSON: encoder.json (data/bpe.c), the header of a .safetensors file and config.json
// (data/safetensors.c). The caller walks the value it expects and the reader checks each piece,
// so a file that is read to its end was JSON. It is strict, as the RFC is, and the same for every
// file:
//   - whitespace is space, tab, LF and CR;
//   - a string holds no raw control byte (< 0x20), only valid UTF-8 (shortest form, no encoded
//     surrogates, nothing past U+10FFFF) and only the escapes \" \\ \/ \b \f \n \r \t \uXXXX,
//     where a surrogate is accepted only as a high half followed by a low one (one character);
//     \u0000 is allowed (a ByteBuf holds a length), a caller that wants C strings refuses it;
//   - a number is -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?: no leading zeros, no '+';
//   - values skipped unread (json_skip) are checked all the same, nested at most JSON_MAX_DEPTH.
// Nothing here ends the program: a problem is reported in err (fail_with in utils.c) as
//   "<name>: at byte <offset>: <problem>"     (name NULL: "at byte <offset>: <problem>")
// with the offset counted from the start of the file, so that `xxd -s <offset>` shows it, and
// the functions return -1; the fuzzers (fuzz/fuzz_vocab.c, fuzz/fuzz_safetensors.c) feed it anything.
#ifndef JSON_H
#define JSON_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"   // ByteBuf

#define JSON_MAX_DEPTH 64

typedef struct {
    const uint8_t *p;       // the next byte to read
    const uint8_t *start;   // byte 0 of the file: offsets in messages count from here
    const uint8_t *end;     // one past the last byte of the JSON text
    const char *name;       // the file, first in every message; NULL when the caller names it
    char *err;
    size_t err_len;
} Json;

// A reader of the JSON text file[at, n): a file whose JSON begins after a binary prefix (a
// .safetensors header, at 8) keeps its offsets in file bytes.
Json json_reader(const uint8_t *file, size_t n, size_t at, const char *name, char *err, size_t err_len);

// Reports "<name>: at byte <offset of j->p>: <fmt ...>" in j->err. Returns -1.
int json_fail(const Json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// The next byte after whitespace (which is skipped), or -1 at the end of the text.
int json_peek(Json *j);
// The byte c next (after whitespace): steps over it and returns 0, or fails naming what is there.
int json_expect(Json *j, char c);

// Objects and arrays, one element at a time, once their '{' or '[' is read:
//     int more;
//     for (size_t i = 0; (more = json_next(j, '}', i)) > 0; i++) { key, value }
//     if (more < 0) return -1;
// Returns 1 when element i follows (after the ',' that ends element i - 1), 0 when the closing
// byte close did and was read, -1 when neither did (no element after a ',' is the caller's error).
int json_next(Json *j, char close, size_t i);
// An object's key and the ':' after it, into key (NULL: only checked).
int json_key(Json *j, ByteBuf *key);

// A string, unescaped into out as UTF-8 (out->len is reset first; out NULL: only checked).
// out->data is NUL-terminated, the NUL not counted in out->len.
int json_string(Json *j, ByteBuf *out);
// Whether s holds exactly text (s may hold NUL bytes; a C string cannot equal those).
int json_string_is(const ByteBuf *s, const char *text);
// An integer in [lo, hi]; what names it in messages ("n_head: 4294967298 is out of range ...").
// A fraction or an exponent (1.0, 1e3) is refused: the files give sizes and ids as integers.
int json_uint(Json *j, const char *what, uint64_t lo, uint64_t hi, uint64_t *v);
// Checks and steps over one value of any kind.
int json_skip(Json *j);
// Nothing but whitespace after the top-level value.
int json_end(Json *j);

// Decodes one UTF-8 character at p (before end) as strictly as JSON strings are read: returns its
// length and the code point in *cp, or 0 when p does not begin a valid character. data/bpe.c
// reads vocab.bpe's UTF-8 with it too.
int utf8_decode(const uint8_t *p, const uint8_t *end, uint32_t *cp);

#endif
