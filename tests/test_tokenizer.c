// tests/test_tokenizer.c: the GPT-2 tokenizer (data/bpe.c), the llm.c tokenizer and token files
// (data/tokenizer.c) and the prepare_data and tokenize programs.
//
// Without the GPT-2 files only the synthetic-vocabulary and file-format parts run. The GPT-2
// vocabulary and TinyShakespeare are looked for in $DATA_SRC, ../shared/data and data/ (tests
// run from the repository root); the programs in $BUILD (set by tests/run_tests.sh).
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../data/bpe.h"
#include "../data/tokenizer.h"
#include "../utils.h"
#include "test.h"

static char tmp_dir[] = "/tmp/test_tokenizer.XXXXXX";
static unsigned long long rng;

static unsigned rand_u32(void) {
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    return (unsigned)((rng * 0x2545F4914F6CDD1DULL) >> 32);
}

// ---- helpers ---------------------------------------------------------------------------------

// First existing path among $DATA_SRC/<rel>, ../shared/data/<rel>, data/<rel>; NULL when none.
static const char *find_data(const char *rel, char *buf, size_t cap) {
    const char *roots[3] = {getenv("DATA_SRC"), "../shared/data", "data"};
    for (int i = 0; i < 3; i++) {
        if (!roots[i] || !roots[i][0]) continue;
        snprintf(buf, cap, "%s/%s", roots[i], rel);
        if (file_exists(buf)) return buf;
    }
    return NULL;
}

// Run fn(arg) in a child process with stderr captured into out. Returns the exit status, or
// 128 + signal when it died of one. For checking that errors end the program with a message.
static int run_in_child(void (*fn)(void *), void *arg, char *out, size_t cap) {
    int fd[2];
    if (pipe(fd) != 0) die("pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fn(arg);
        _exit(0);
    }
    close(fd[1]);
    size_t len = 0;
    ssize_t got;
    while ((got = read(fd[0], out + len, cap - 1 - len)) > 0) len += (size_t)got;
    out[len] = 0;
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Run a shell command with stderr and stdout captured; returns the exit status.
static int run_command(const char *cmd, char *out, size_t cap) {
    char full[8192];
    snprintf(full, sizeof(full), "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) die("popen %s: %s", cmd, strerror(errno));
    size_t len = fread(out, 1, cap - 1, p);
    out[len] = 0;
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen_or_die(path, "wb");
    fwrite_or_die(data, 1, n, f, path);
    fclose(f);
}

static int ids_equal(const TokenList *got, const int *want, size_t n) {
    return got->len == n && (n == 0 || memcmp(got->ids, want, n * sizeof(int)) == 0);
}

static void print_ids(const char *label, const int *ids, size_t n) {
    printf("  %s:", label);
    for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
    printf("\n");
}

// ---- a synthetic vocabulary: 256 bytes, a few merges, <|endoftext|> ---------------------------

static size_t put_utf8(char *out, unsigned cp) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;   // the byte alphabet stays below U+0800
}

// GPT-2's byte -> character map (the inverse of what bpe.c decodes)
static unsigned alphabet_codepoint(int byte) {
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        unsigned cp = printable ? (unsigned)b : 256u + (unsigned)extra++;
        if (b == byte) return cp;
    }
    return 0;
}

// Spell bytes in the alphabet, as UTF-8 (vocab.bpe) or as JSON \u escapes (encoder.json)
static size_t spell(const char *bytes, char *out, int json) {
    size_t n = 0;
    for (const char *p = bytes; *p; p++) {
        unsigned cp = alphabet_codepoint((unsigned char)*p);
        if (json) n += (size_t)sprintf(out + n, "\\u%04x", cp);
        else n += put_utf8(out + n, cp);
    }
    out[n] = 0;
    return n;
}

typedef struct { const char *left, *right; } Merge;
static const Merge toy_merges[] = {{"a", "a"}, {"aa", "a"}, {"b", "c"}, {"a", "bc"}, {" ", "t"}};
#define TOY_MERGES 5
// ids: bytes 0..255 in byte order, then the merges, then <|endoftext|> = 261

static void toy_vocab(char *merges, char *json) {
    char sp[64], sp2[64];
    size_t m = (size_t)sprintf(merges, "#version: 0.2\n");
    for (int i = 0; i < TOY_MERGES; i++) {
        spell(toy_merges[i].left, sp, 0);
        spell(toy_merges[i].right, sp2, 0);
        m += (size_t)sprintf(merges + m, "%s %s\n", sp, sp2);
    }
    size_t j = (size_t)sprintf(json, "{");
    for (int b = 0; b < 256; b++) {
        char one[2] = {(char)b, 0};
        if (b == 0) {   // NUL cannot sit in a C string: spell byte 0 (U+0100) by hand
            j += (size_t)sprintf(json + j, "\"\\u0100\": 0, ");
            continue;
        }
        spell(one, sp, 1);
        j += (size_t)sprintf(json + j, "\"%s\": %d, ", sp, b);
    }
    for (int i = 0; i < TOY_MERGES; i++) {
        char both[64];
        snprintf(both, sizeof(both), "%s%s", toy_merges[i].left, toy_merges[i].right);
        spell(both, sp, 1);
        j += (size_t)sprintf(json + j, "\"%s\": %d, ", sp, 256 + i);
    }
    sprintf(json + j, "\"<|endoftext|>\": 261}");
}

static int toy_parse(BPE *bpe, const char *merges, const char *json, char *err, size_t cap) {
    return bpe_parse(bpe, merges, strlen(merges), json, strlen(json), err, cap);
}

// Replace the first occurrence of `from` in s by `to` (s has room).
static void replace(char *s, const char *from, const char *to) {
    char *at = strstr(s, from);
    if (!at) die("test bug: '%s' not found", from);
    size_t fl = strlen(from), tl = strlen(to);
    memmove(at + tl, at + fl, strlen(at + fl) + 1);
    memcpy(at, to, tl);
}

static void test_synthetic_vocab(void) {
    static char merges[4096], json[16384], m2[4096], j2[16384];
    char err[512];
    toy_vocab(merges, json);
    BPE bpe;
    int rc = toy_parse(&bpe, merges, json, err, sizeof(err));
    CHECK(rc == 0, "synthetic vocabulary loads: %s", rc ? err : "");
    if (rc != 0) return;
    CHECK(bpe.n_merges == TOY_MERGES && bpe.eot_token == 261 && bpe.tokenizer.vocab_size == 262,
          "synthetic vocabulary: %d merges, eot %d, %d tokens", bpe.n_merges, bpe.eot_token, bpe.tokenizer.vocab_size);
    BPEScratch *s = bpe_scratch_new(&bpe);
    struct { const char *text; int special; int ids[8]; size_t n; } cases[] = {
        {"aaaa", 0, {256, 256}, 2},         // (a,a) twice, left to right; (aa,aa) is no merge
        {"aaa", 0, {257}, 1},               // (a,a) then (aa,a)
        {"aaaaa", 0, {256, 257}, 2},        // (a,a) twice: aa|aa|a; then (aa,a): aa|aaa
        {"abc", 0, {259}, 1},               // (b,c) first, then (a,bc)
        {"cab", 0, {'c', 'a', 'b'}, 3},     // no listed pair
        {"a t", 0, {'a', 260}, 2},          // pieces "a", " t"
        {"<|endoftext|>", 1, {261}, 1},
        {"x<|endoftext|>", 0, {'x', '<', '|'}, 3},   // ordinary text: 14 byte tokens, checked below
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TokenList out = {0};
        bpe_encode(&bpe, s, (const uint8_t *)cases[i].text, strlen(cases[i].text), cases[i].special, &out);
        int ok = i == 7 ? out.len == 14 && memcmp(out.ids, cases[i].ids, 3 * sizeof(int)) == 0 && out.ids[13] == '>'
                        : ids_equal(&out, cases[i].ids, cases[i].n);
        CHECK(ok, "synthetic vocabulary encodes '%s'", cases[i].text);
        if (!ok) print_ids("got", out.ids, out.len);
        tokenlist_free(&out);
    }
    bpe_scratch_free(s);
    bpe_free(&bpe);

    // damaged vocabularies: each is refused, with a reason naming the file
    struct { const char *what, *file, *from, *to, *expect; } bad[] = {
        {"merge of an unknown token", "merges", "a bc", "a zz", "vocab.bpe line"},
        {"merge before its parts exist", "merges", "a a\n", "aa a\na a\n", "before an earlier line"},
        {"two merges make one token", "merges", "#version: 0.2\n", "#version: 0.2\nb c\n", "already made"},
        {"a line with three tokens", "merges", "b c", "b c d", "two tokens separated by one space"},
        {"an empty line inside", "merges", "b c\n", "\nb c\n", "empty line"},
        {"missing <|endoftext|>", "json", ", \"<|endoftext|>\": 261", "", "no <|endoftext|>"},
        {"duplicate id", "json", "\"<|endoftext|>\": 261", "\"<|endoftext|>\": 260", "two tokens"},
        {"id out of range", "json", "\"<|endoftext|>\": 261", "\"<|endoftext|>\": 9999", "out of range"},
        {"negative id", "json", "\"<|endoftext|>\": 261", "\"<|endoftext|>\": -1", "a token id: -1 is out of range"},
        {"a token made by no merge", "merges", "a bc\n", "", "made by no merge"},
        {"a character outside the byte alphabet", "json", "\"<|endoftext|>\"", "\" \"", "byte alphabet"},
        {"not JSON", "json", "{", "[", "not a JSON object"},
        {"truncated JSON", "json", "261}", "261", "expected ',' or '}'"},
        {"unterminated string", "json", "\"<|endoftext|>\": 261}", "\"<|endoftext", "unterminated"},
        {"lone surrogate", "json", "\"<|endoftext|>\"", "\"\\ud800\"", "surrogate"},
        {"trailing text", "json", "261}", "261} x", "text after the JSON value"},
        {"invalid UTF-8 in a key", "json", "\"<|endoftext|>\"", "\"<|endoftext|>\xFF\"", "invalid UTF-8 (byte 0xFF)"},
        {"a leading zero (not JSON)", "json", "261}", "0261}", "expected ',' or '}', found '2'"},
        {"an id with a fraction", "json", "261}", "261.0}", "a token id: 261.0 is not an integer"},
        {"a gap in the ids", "json", "\"\\u0041\": 65, ", "", "out of range"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        strcpy(m2, merges);
        strcpy(j2, json);
        replace(bad[i].file[0] == 'm' ? m2 : j2, bad[i].from, bad[i].to);
        err[0] = 0;
        rc = toy_parse(&bpe, m2, j2, err, sizeof(err));
        CHECK(rc != 0 && strstr(err, bad[i].expect) &&
              strstr(err, bad[i].file[0] == 'm' && !strstr(bad[i].expect, "no merge") ? "vocab.bpe" : "encoder.json"),
              "%s is refused with a message containing '%s' (got rc %d: %s)", bad[i].what, bad[i].expect, rc, err);
        if (rc == 0) bpe_free(&bpe);
    }
    // each byte of the files cut off: refused or loaded, never a crash (the fuzzer goes further)
    size_t mlen = strlen(merges), jlen = strlen(json);
    int refused = 0;
    for (size_t cut = 0; cut < jlen; cut += 7) {
        rc = bpe_parse(&bpe, merges, mlen, json, cut, err, sizeof(err));
        refused += rc != 0;
        if (rc == 0) bpe_free(&bpe);
    }
    CHECK(refused == (int)((jlen + 6) / 7), "every truncated encoder.json is refused");
}

// ---- tokenizer file and token file formats ----------------------------------------------------

static void test_tokenizer_file(void) {
    // a table with the edge cases: a NUL byte, a 255-byte token, a 1-byte token
    static uint8_t long_tok[255];
    memset(long_tok, 'x', sizeof(long_tok));
    const uint8_t *tok[4] = {(const uint8_t *)"\0", (const uint8_t *)"hello", long_tok, (const uint8_t *)"<|e|>"};
    size_t len[4] = {1, 5, 255, 5};
    Tokenizer t, u;
    char err[256];
    CHECK(tokenizer_from_table(&t, 4, 3, tok, len, err, sizeof(err)) == 0, "tokenizer from a table: %s", err);
    char path[512];
    snprintf(path, sizeof(path), "%s/tok.bin", tmp_dir);
    tokenizer_save(&t, path);
    tokenizer_load(&u, path);
    int same = u.vocab_size == 4 && u.eot_token == 3;
    for (int i = 0; i < 4 && same; i++) {
        size_t a, b;
        const uint8_t *x = tokenizer_token(&t, i, &a), *y = tokenizer_token(&u, i, &b);
        same = a == b && memcmp(x, y, a) == 0;
    }
    CHECK(same, "tokenizer file round trip (NUL byte and 255-byte tokens included)");
    size_t n;
    uint8_t *file = read_file_or_die(path, &n);
    uint32_t header[3];
    memcpy(header, file, sizeof(header));
    CHECK(n == 1024 + 2 + 6 + 256 + 6 && header[0] == 20240328 && header[1] == 2 && header[2] == 4,
          "tokenizer file layout: %zu bytes, header %u %u %u", n, header[0], header[1], header[2]);

    int ids[3] = {1, 0, 3}, bad_ids[3] = {1, 4, 0};
    ByteBuf out = {0};
    size_t bad_index = 99;
    CHECK(tokenizer_decode(&u, ids, 3, &out, &bad_index) == 0 && out.len == 11 &&
          memcmp(out.data, "hello\0<|e|>", 11) == 0, "decode ids to bytes");
    out.len = 0;
    CHECK(tokenizer_decode(&u, bad_ids, 3, &out, &bad_index) == -1 && bad_index == 1,
          "decode refuses id 4 of a 4-token vocabulary and says where");
    int neg = -1;
    CHECK(tokenizer_decode(&u, &neg, 1, &out, &bad_index) == -1, "decode refuses a negative id");
    bytebuf_free(&out);

    // damaged tokenizer files
    uint8_t *copy = malloc(n + 16);
    // each case: write a 4-byte value at offset (when cut is 0), or cut bytes off the end
    struct { const char *what; size_t offset; uint32_t value; size_t cut; const char *expect; } bad[] = {
        {"bad magic", 0, 12345, 0, "not a tokenizer file"},
        {"bad version", 4, 7, 0, "version 7"},
        {"version 1 with another vocabulary", 4, 1, 0, "version 1"},
        {"end-of-text id out of range", 12, 4, 0, "outside the vocabulary"},
        {"huge vocabulary", 8, 0x7FFFFFFF, 0, "does not fit"},
        {"truncated", 0, 0, 200, "truncated"},
        {"header only", 0, 0, n - 1024, "does not fit"},
        {"shorter than the header", 0, 0, n - 1000, "too short"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memcpy(copy, file, n);
        if (bad[i].cut == 0) memcpy(copy + bad[i].offset, &bad[i].value, 4);
        err[0] = 0;
        Tokenizer v;
        int rc = tokenizer_parse(&v, copy, n - bad[i].cut, err, sizeof(err));
        CHECK(rc != 0 && strstr(err, bad[i].expect), "tokenizer file with %s is refused ('%s': %s)", bad[i].what,
              bad[i].expect, err);
        if (rc == 0) tokenizer_free(&v);
    }
    memcpy(copy, file, n);
    copy[1024 + 2 + 6] = 0;   // the length byte of token 2
    Tokenizer v;
    CHECK(tokenizer_parse(&v, copy, n, err, sizeof(err)) != 0 && strstr(err, "token 2 has length 0"),
          "tokenizer file with a zero-length token is refused (%s)", err);
    memcpy(copy, file, n);
    copy[n] = 'z';
    CHECK(tokenizer_parse(&v, copy, n + 1, err, sizeof(err)) != 0 && strstr(err, "after the last token"),
          "tokenizer file with trailing bytes is refused");
    free(copy);
    free(file);
    tokenizer_free(&t);
    tokenizer_free(&u);

    // token files
    int32_t th[TOKEN_FILE_HEADER_INTS];
    uint16_t toks[3] = {1, 50256, 65535};
    static uint8_t tf[TOKEN_FILE_HEADER_BYTES + 6];
    token_file_header_init(th, 3);
    memcpy(tf, th, sizeof(th));
    memcpy(tf + sizeof(th), toks, sizeof(toks));
    uint16_t *got = NULL;
    size_t ntok = 0;
    CHECK(token_file_parse(tf, sizeof(tf), &got, &ntok, err, sizeof(err)) == 0 && ntok == 3 &&
          memcmp(got, toks, sizeof(toks)) == 0 && th[0] == 20240520 && th[1] == 1,
          "token file round trip: %s", err);
    free(got);
    struct { const char *what; int index; int32_t value; size_t cut; const char *expect; } tbad[] = {
        {"bad magic", 0, 20240328, 0, "not a token file"},
        {"version 2 (uint32 tokens)", 1, 2, 0, "version 2"},
        {"count larger than the file", 2, 4, 0, "header says 4 tokens"},
        {"negative count", 2, -3, 0, "negative"},
        {"a torn last token", 0, 20240520, 1, "header says 3 tokens"},
        {"no header", 0, 20240520, sizeof(tf) - 10, "too short"},
    };
    for (size_t i = 0; i < sizeof(tbad) / sizeof(tbad[0]); i++) {
        static uint8_t c[sizeof(tf)];
        memcpy(c, tf, sizeof(tf));
        memcpy(c + 4 * tbad[i].index, &tbad[i].value, 4);
        err[0] = 0;
        int rc = token_file_parse(c, sizeof(tf) - tbad[i].cut, &got, &ntok, err, sizeof(err));
        CHECK(rc != 0 && strstr(err, tbad[i].expect), "token file with %s is refused ('%s': %s)", tbad[i].what,
              tbad[i].expect, err);
        if (rc == 0) free(got);
    }
}

// ---- errors that end the program ---------------------------------------------------------------

static void load_vocab(void *dir) {
    BPE bpe;
    bpe_load(&bpe, dir);
}
static void load_tokenizer(void *path) {
    Tokenizer t;
    tokenizer_load(&t, path);
}
static void save_tokenizer(void *path) {
    const uint8_t *tok[1] = {(const uint8_t *)"a"};
    size_t len[1] = {1};
    Tokenizer t;
    char err[64];
    tokenizer_from_table(&t, 1, 0, tok, len, err, sizeof(err));
    tokenizer_save(&t, path);
}

static void test_fatal_errors(void) {
    char msg[4096], path[600];
    int rc = run_in_child(load_vocab, "/nonexistent/gpt2", msg, sizeof(msg));
    CHECK(rc == 1 && strstr(msg, "/nonexistent/gpt2/vocab.bpe") && strstr(msg, "make data"),
          "missing vocabulary: exit 1 naming the file and what to do (%d: %s)", rc, msg);
    snprintf(path, sizeof(path), "%s/corrupt", tmp_dir);
    mkdir(path, 0755);
    char file[700];
    snprintf(file, sizeof(file), "%s/vocab.bpe", path);
    write_file(file, "#version: 0.2\na b\n", 18);
    snprintf(file, sizeof(file), "%s/encoder.json", path);
    write_file(file, "{\"a\": 0, \"b\": 1", 15);
    rc = run_in_child(load_vocab, path, msg, sizeof(msg));
    CHECK(rc == 1 && strstr(msg, file), "corrupt encoder.json: exit 1 naming the file (%d: %s)", rc, msg);
    snprintf(file, sizeof(file), "%s/vocab.bpe", path);
    rc = run_in_child(load_tokenizer, file, msg, sizeof(msg));
    CHECK(rc == 1 && strstr(msg, file) && strstr(msg, "too short"),
          "a text file read as a tokenizer file: exit 1 naming it (%d: %s)", rc, msg);
    rc = run_in_child(save_tokenizer, "/nonexistent/dir/tok.bin", msg, sizeof(msg));
    CHECK(rc == 1 && strstr(msg, "/nonexistent/dir/tok.bin"), "unwritable folder: exit 1 naming the file (%d: %s)",
          rc, msg);
    // files that are not files: a directory, a device (file_size_or_die, atomic_open)
    rc = run_in_child(load_tokenizer, tmp_dir, msg, sizeof(msg));
    CHECK(rc == 1 && strstr(msg, tmp_dir) && strstr(msg, "is a directory, not a file"),
          "a directory as the tokenizer file: exit 1 saying so (%d: %s)", rc, msg);
    rc = run_in_child(load_tokenizer, "/dev/null", msg, sizeof(msg));
    CHECK(rc == 1 && strstr(msg, "/dev/null is not a regular file"), "a device as the tokenizer file (%d: %s)", rc, msg);
    snprintf(file, sizeof(file), "%s/encoder.json", path);
    rc = run_in_child(save_tokenizer, path, msg, sizeof(msg));
    CHECK(rc == 1 && strstr(msg, "corrupt is a directory"), "a tokenizer file saved over a directory (%d: %s)", rc, msg);
    rc = run_in_child(save_tokenizer, "/dev/full", msg, sizeof(msg));
    CHECK(rc == 1 && strstr(msg, "/dev/full is not a regular file"),
          "a tokenizer file saved over a device is refused, not renamed over it (%d: %s)", rc, msg);
    remove(file);
    mkdir(file, 0755);
    rc = run_in_child(load_vocab, path, msg, sizeof(msg));
    CHECK(rc == 1 && strstr(msg, "encoder.json is a directory, not a file"), "a directory as encoder.json (%d: %s)",
          rc, msg);
    rmdir(file);
}

// ---- GPT-2: hand-checked encodings ---------------------------------------------------------------

// Each case: the text, then its tokens as byte strings (a '|' between tokens), then the ids. The
// token strings were worked out by hand from the split rules (the pieces) and then the vocabulary;
// the ids are GPT-2's for those strings (tiktoken agrees). The test checks both the ids and that
// each id decodes to its string.
typedef struct {
    const char *name, *text, *tokens;
    int ids[24];
    int n;
} Case;

static const Case gpt2_cases[] = {
    {"plain words", "Hello world", "Hello| world", {15496, 995}, 2},
    {"contractions", "I'm you're we've he'll she'd it's don't",
     "I|'m| you|'re| we|'ve| he|'ll| she|'d| it|'s| don|'t",
     {40, 1101, 345, 821, 356, 1053, 339, 1183, 673, 1549, 340, 338, 836, 470}, 14},
    // upper case is not a contraction: "'" is punctuation, the letters a word
    {"upper-case contractions", "I'M YOU'RE WE'VE HE'LL SHE'D IT'S DON'T",
     "I|'|M| YOU|'|RE| WE|'|VE| HE|'|LL| SHE|'|D| IT|'|S| DON|'|T",
     {40, 6, 44, 7013, 6, 2200, 12887, 6, 6089, 11179, 6, 3069, 48052, 6, 35, 7283, 6, 50, 23917, 6, 51}, 21},
    {"contractions back to back", "'s't're've'm'll'd", "'s|'t|'re|'ve|'m|'ll|'d",
     {338, 470, 821, 1053, 1101, 1183, 1549}, 7},
    // digit runs are one piece each (with one leading space), then BPE splits them
    {"digit runs", "12345 6789 3.14159", "123|45| 6|789| 3|.|14|159", {10163, 2231, 718, 40401, 513, 13, 1415, 19707}, 8},
    // a run of spaces leaves its last space to the next word; at the end it stays whole
    {"spaces before a word", "a   b", "a| | | b", {64, 220, 220, 275}, 4},
    {"spaces at the end", "a   ", "a| | | ", {64, 220, 220, 220}, 4},
    {"leading spaces", "  leading", " | leading", {220, 3756}, 2},
    {"newlines", "a\n\n\nb", "a|\n\n|\n|b", {64, 628, 198, 65}, 4},
    // "\r\n" before a letter: the whitespace run gives up its last character
    {"CRLF", "a\r\nb\r\n", "a|\r|\n|b|\r|\n", {64, 201, 198, 65, 201, 198}, 6},
    {"tabs", "\tfoo\t\tbar", "\t|foo|\t|\t|bar", {197, 21943, 197, 197, 5657}, 5},
    {"punctuation runs", " !!! ?!", " |!!!| ?|!", {220, 10185, 5633, 0}, 4},
    {"Cyrillic", "Привет мир", "\xd0|\x9f|р|и|в|е|т| \xd0|\xbc|и|р",
     {140, 253, 21169, 18849, 38857, 16843, 20375, 12466, 120, 18849, 21169}, 11},
    {"CJK", "你好世界", "\xe4\xbd|\xa0|\xe5\xa5|\xbd|\xe4\xb8|\x96|\xe7\x95|\x8c",
     {19526, 254, 25001, 121, 10310, 244, 45911, 234}, 8},
    // Devanagari vowel signs and virama are marks (\p{M}), not letters: each splits the word
    {"Devanagari with combining marks", "नमस्ते",
     "\xe0\xa4|\xa8|\xe0\xa4|\xae|\xe0\xa4|\xb8|\xe0\xa5|\x8d|\xe0\xa4|\xa4|\xe0\xa5|\x87",
     {11976, 101, 11976, 106, 11976, 116, 24231, 235, 11976, 97, 24231, 229}, 12},
    // e + U+0301 (a mark, its own piece) against the precomposed é (a letter)
    {"combining acute", "e\xcc\x81 \xc3\xa9", "e|\xcc|\x81| \xc3\xa9", {68, 136, 223, 38251}, 4},
    {"emoji, skin tone, ZWJ family", "👍🏽 🎉 party 👨\u200d👩\u200d👧",
     "\xf0\x9f\x91|\x8d|\xf0\x9f|\x8f|\xbd| \xf0\x9f|\x8e|\x89| party| \xf0\x9f\x91|\xa8|\xe2\x80|\x8d|"
     "\xf0\x9f\x91|\xa9|\xe2\x80|\x8d|\xf0\x9f\x91|\xa7",
     {41840, 235, 8582, 237, 121, 12520, 236, 231, 2151, 50169, 101, 447, 235, 41840, 102, 447, 235, 41840, 100}, 19},
    // U+180E is not White_Space (PCRE2's plain \s says it is; GPT-2's regex says no): " \u180e" is
    // one punctuation piece, so " \xe1" merges
    {"U+180E is not whitespace", "a \xe1\xa0\x8e" "b", "a| \xe1|\xa0|\x8e|b", {64, 28053, 254, 236, 65}, 5},
    // U+1E4D0 NAG MUNDARI LETTER O, new in Unicode 15: a letter, so "'s" is a piece of its own
    // (to PCRE2 with Unicode 14 tables it is unassigned, and "\xf0\x9e\x93\x90'" one piece)
    {"a Unicode 15 letter", "\xf0\x9e\x93\x90's", "\xf0|\x9e|\x93|\x90|'s", {172, 252, 241, 238, 338}, 5},
    {"no-break space", "a\xc2\xa0" "b", "a|\xc2\xa0|b", {64, 1849, 65}, 3},
    {"ideographic space", "x\xe3\x80\x80y", "x|\xe3\x80|\x80|y", {87, 5099, 222, 88}, 4},
    // (its tokens contain the bar that separates tokens here, so they are not spelled out)
    {"end of text as text", "<|endoftext|>", NULL, {27, 91, 437, 1659, 5239, 91, 29}, 7},
    {"mixed", "don't!!! 2024", "don|'t|!!!| 2024", {9099, 470, 10185, 48609}, 4},
};

// Split "a|b|c" into token strings.
static int split_tokens(const char *spec, char out[][32], int cap) {
    int n = 0;
    for (const char *p = spec; *p && n < cap; n++) {
        size_t k = 0;
        while (*p && *p != '|' && k < 31) out[n][k++] = *p++;
        out[n][k] = 0;
        if (*p == '|') p++;
    }
    return n;
}

// The pre-tokenizer's letters and numbers are tiktoken's only when PCRE2's Unicode tables are the
// same version (see data/bpe.h); tests/test_tiktoken.py compares every code point.
static void test_unicode_version(void) {
    char version[32];
    bpe_unicode_version(version, sizeof(version));
    CHECK(strcmp(version, BPE_UNICODE_VERSION) == 0,
          "the linked PCRE2 has Unicode %s tables, tiktoken's are %s: link the PCRE2 that "
          "scripts/build_pcre2.sh builds (the Makefile's default)", version, BPE_UNICODE_VERSION);
}

static void test_gpt2_cases(const BPE *bpe, BPEScratch *s) {
    CHECK(bpe->regex_jit, "PCRE2 JIT-compiled GPT-2's pattern");
    for (size_t c = 0; c < sizeof(gpt2_cases) / sizeof(gpt2_cases[0]); c++) {
        const Case *k = &gpt2_cases[c];
        TokenList out = {0};
        bpe_encode(bpe, s, (const uint8_t *)k->text, strlen(k->text), 0, &out);
        int ok = ids_equal(&out, k->ids, (size_t)k->n);
        CHECK(ok, "GPT-2 encodes %s: '%s'", k->name, k->text);
        if (!ok) {
            print_ids("want", k->ids, (size_t)k->n);
            print_ids("got ", out.ids, out.len);
        }
        tokenlist_free(&out);
    }
    // the token strings: each id decodes to the bytes written in the table
    for (size_t c = 0; c < sizeof(gpt2_cases) / sizeof(gpt2_cases[0]); c++) {
        const Case *k = &gpt2_cases[c];
        if (!k->tokens) continue;
        char toks[24][32];
        int n = split_tokens(k->tokens, toks, 24), ok = n == k->n;
        for (int i = 0; ok && i < n; i++) {
            size_t len;
            const uint8_t *t = tokenizer_token(&bpe->tokenizer, k->ids[i], &len);
            ok = t && len == strlen(toks[i]) && memcmp(t, toks[i], len) == 0;
        }
        CHECK(ok, "GPT-2 ids of %s decode to the hand-written tokens", k->name);
    }
    TokenList out = {0};
    bpe_encode(bpe, s, (const uint8_t *)"<|endoftext|>", 13, 1, &out);
    CHECK(out.len == 1 && out.ids[0] == 50256, "<|endoftext|> is id 50256 when special tokens are allowed");
    out.len = 0;
    const char *mixed = "a\n\n<|endoftext|>b<|endoftext|>";
    bpe_encode(bpe, s, (const uint8_t *)mixed, strlen(mixed), 1, &out);
    int want[] = {64, 628, 50256, 65, 50256};   // "\n\n" whole: the text before the token ends there
    CHECK(ids_equal(&out, want, 5), "text around <|endoftext|> is encoded as separate texts");
    out.len = 0;
    bpe_encode(bpe, s, (const uint8_t *)"", 0, 1, &out);
    CHECK(out.len == 0, "the empty text has no tokens");
    out.len = 0;
    // invalid UTF-8: each run of bad bytes is a piece of its own
    const char *bad = "a\xff\xfe" "b\xc3";
    bpe_encode(bpe, s, (const uint8_t *)bad, strlen(bad), 0, &out);
    int want_bad[] = {64, bpe->byte_token[0xff], bpe->byte_token[0xfe], 65, bpe->byte_token[0xc3]};
    CHECK(ids_equal(&out, want_bad, 5), "invalid UTF-8 bytes become byte tokens");
    tokenlist_free(&out);
    CHECK(bpe->tokenizer.vocab_size == 50257 && bpe->eot_token == 50256 && bpe->n_merges == 50000,
          "GPT-2 vocabulary: %d tokens, %d merges", bpe->tokenizer.vocab_size, bpe->n_merges);
}

// ---- GPT-2: round trips and parallel encoding on random bytes ---------------------------------

static size_t random_text(uint8_t *buf, size_t cap) {
    static const char *pool[] = {"a", "Z", "'s", "'LL", " ", "  ", "\n", "\r\n", "\t", "0", "42", ".", "!?",
                                 "é", "\xcc\x81", "ж", "中", "😀", "\xe2\x80\x8d", "\xc2\xa0", "\xe1\xa0\x8e",
                                 "<|endoftext|>", "\xff", "\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf"};
    size_t n = 0, target = rand_u32() % cap;
    while (n < target) {
        unsigned kind = rand_u32() % 4;
        if (kind == 0) {
            buf[n++] = (uint8_t)rand_u32();   // any byte at all
        } else {
            const char *p = pool[rand_u32() % (sizeof(pool) / sizeof(pool[0]))];
            size_t k = strlen(p);
            if (n + k > cap) break;
            memcpy(buf + n, p, k);
            n += k;
        }
    }
    return n;
}

static void test_gpt2_random(const BPE *bpe, BPEScratch **s) {
    enum { CAP = 600, TRIALS = 1500 };
    uint8_t text[CAP];
    int round_trip_ok = 1, range_ok = 1, parallel_ok = 1;
    for (int trial = 0; trial < TRIALS; trial++) {
        size_t n = random_text(text, CAP);
        int special = trial % 2;
        TokenList ids = {0}, par = {0}, parts = {0};
        bpe_encode(bpe, s[0], text, n, special, &ids);
        ByteBuf back = {0};
        size_t bad;
        int rc = tokenizer_decode(&bpe->tokenizer, ids.ids, ids.len, &back, &bad);
        if (rc != 0 || back.len != n || (n && memcmp(back.data, text, n) != 0)) {
            if (round_trip_ok) printf("  round trip fails for a %zu-byte text (trial %d)\n", n, trial);
            round_trip_ok = 0;
        }
        for (size_t i = 0; i < ids.len; i++)
            if (ids.ids[i] < 0 || ids.ids[i] >= bpe->tokenizer.vocab_size) range_ok = 0;
        // the same text in parts, cut at every cut point: the same ids
        size_t begin = 0;
        while (begin < n) {
            size_t end = bpe_find_cut(text, n, begin + 1 + rand_u32() % 40, n);
            bpe_encode_range(bpe, s[1], text, n, begin, end, special, &parts);
            begin = end;
        }
        bpe_encode_parallel(bpe, s, 3, text, n, special, &par);
        if (parts.len != ids.len || (ids.len && memcmp(parts.ids, ids.ids, ids.len * sizeof(int)) != 0)) {
            if (range_ok) printf("  encoding in parts differs (trial %d)\n", trial);
            range_ok = 0;
        }
        if (par.len != ids.len || (ids.len && memcmp(par.ids, ids.ids, ids.len * sizeof(int)) != 0)) parallel_ok = 0;
        bytebuf_free(&back);
        tokenlist_free(&ids);
        tokenlist_free(&par);
        tokenlist_free(&parts);
    }
    CHECK(round_trip_ok, "decode(encode(x)) == x for %d random byte strings (invalid UTF-8 included)", TRIALS);
    CHECK(range_ok, "encoding in parts at cut points equals encoding whole, ids in range");
    CHECK(parallel_ok, "3-thread encoding equals 1-thread encoding");

    // long runs of one class: one piece each, deep regex backtracking and a long merge
    size_t big = 1 << 20;
    uint8_t *run = malloc(big + 1);
    const char fill[] = {' ', 'a', '7', '!', '\n'};
    int long_ok = 1;
    for (int k = 0; k < 5; k++) {
        memset(run, fill[k], big);
        run[big] = 'x';
        TokenList ids = {0};
        bpe_encode(bpe, s[0], run, big + 1, 0, &ids);
        ByteBuf back = {0};
        size_t bad;
        if (tokenizer_decode(&bpe->tokenizer, ids.ids, ids.len, &back, &bad) != 0 || back.len != big + 1 ||
            memcmp(back.data, run, big + 1) != 0)
            long_ok = 0;
        bytebuf_free(&back);
        tokenlist_free(&ids);
    }
    free(run);
    CHECK(long_ok, "1 MiB runs of spaces, letters, digits, punctuation, newlines round-trip");
}

// ---- GPT-2 files: tokenizer file, TinyShakespeare -------------------------------------------------

static void test_gpt2_tokenizer_file(const BPE *bpe) {
    char path[512];
    snprintf(path, sizeof(path), "%s/gpt2_tokenizer.bin", tmp_dir);
    tokenizer_save(&bpe->tokenizer, path);
    Tokenizer t;
    tokenizer_load(&t, path);
    int same = t.vocab_size == 50257 && t.eot_token == 50256 &&
               memcmp(t.offsets, bpe->tokenizer.offsets, sizeof(uint32_t) * 50258) == 0 &&
               memcmp(t.bytes, bpe->tokenizer.bytes, t.offsets[50257]) == 0;
    CHECK(same, "GPT-2 tokenizer file round trip");
    size_t len;
    const uint8_t *tok = tokenizer_token(&t, 50256, &len);
    CHECK(len == 13 && memcmp(tok, "<|endoftext|>", 13) == 0, "token 50256 decodes to <|endoftext|>");
    tok = tokenizer_token(&t, 220, &len);
    CHECK(len == 1 && tok[0] == ' ', "token 220 is a space");
    tokenizer_free(&t);
}

// llm.c's dev/data/tinyshakespeare.py, in process: the exact counts it documents
static void test_tinyshakespeare_in_process(const BPE *bpe, BPEScratch **s, const uint8_t *text, size_t n) {
    TokenList all = {0};
    const uint8_t *p = text, *end = text + n;
    while (1) {
        tokenlist_push(&all, bpe->eot_token);
        const uint8_t *sep = memmem(p, (size_t)(end - p), "\n\n", 2);
        const uint8_t *stop = sep ? sep + 2 : end;   // sections keep their "\n\n", the last has none
        bpe_encode(bpe, s[0], p, (size_t)(stop - p), 0, &all);
        if (!sep) break;
        p = stop;
    }
    CHECK(all.len == 338028, "TinyShakespeare: %zu tokens (llm.c: 338,028)", all.len);
    CHECK(all.len >= 32768 && all.len - 32768 == 305260, "TinyShakespeare: 32,768 val + %zu train (llm.c: 305,260)",
          all.len - 32768);
    TokenList one = {0}, par = {0};
    bpe_encode(bpe, s[0], text, n, 0, &one);
    bpe_encode_parallel(bpe, s, 3, text, n, 0, &par);
    CHECK(par.len == one.len && memcmp(par.ids, one.ids, one.len * sizeof(int)) == 0,
          "TinyShakespeare as one text: 3 threads give the same %zu ids as 1", one.len);
    tokenlist_free(&all);
    tokenlist_free(&one);
    tokenlist_free(&par);
}

static int files_equal(const char *a, const char *b) {
    size_t na, nb;
    uint8_t *x = read_file_or_die(a, &na), *y = read_file_or_die(b, &nb);
    int same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

// tokenize and prepare_data where input or output is not what it should be, with the synthetic
// vocabulary on disk (no GPT-2 files needed): a message, a non-zero exit, no file half-written
static void test_program_io(const char *build) {
    char prog[600], tool[600], vocab[600], cmd[4096], out[8192], path[700];
    snprintf(prog, sizeof(prog), "%s/prepare_data", build);
    snprintf(tool, sizeof(tool), "%s/tokenize", build);
    snprintf(vocab, sizeof(vocab), "%s/toy", tmp_dir);
    mkdir(vocab, 0755);
    char merges[4096], json[16384];
    toy_vocab(merges, json);
    snprintf(path, sizeof(path), "%s/vocab.bpe", vocab);
    write_file(path, merges, strlen(merges));
    snprintf(path, sizeof(path), "%s/encoder.json", vocab);
    write_file(path, json, strlen(json));
    struct { const char *args, *message, *what; } cases[] = {
        {"encode hi > /dev/full", "stdout: write error: No space left on device", "encode to a full stdout"},
        {"tokens hi > /dev/full", "stdout: write error", "tokens to a full stdout"},
        {"decode 104 105 > /dev/full", "stdout: write error", "decode to a full stdout"},
        {"encode <&-", "stdin is closed: give the text or ids as arguments, or --input FILE", "encode, stdin closed"},
        {"decode <&-", "stdin is closed", "decode, stdin closed"},
        {"encode < /", "stdin is a directory", "encode, a directory as stdin"},
        {"decode < /", "stdin is a directory", "decode, a directory as stdin"},
        {"--input / encode", "/ is a directory, not a file", "--input a directory"},
        {"decode-file /", "/ is a directory, not a file", "decode-file of a directory"},
        {"decode-file /dev/null", "/dev/null is not a regular file", "decode-file of a device"},
        {"--tokenizer / decode 1", "/ is a directory, not a file", "--tokenizer a directory"},
        {"export-tokenizer /dev/full", "/dev/full is not a regular file", "export-tokenizer over a device"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(cmd, sizeof(cmd), "(%s --vocab %s %s)", tool, vocab, cases[i].args);
        int rc = run_command(cmd, out, sizeof(out));
        CHECK(rc == 1 && strstr(out, cases[i].message), "tokenize %s: exit 1 with '%s' (%d: %s)", cases[i].what,
              cases[i].message, rc, out);
    }
    // prepare_data: an empty input, a full stdout (the files are complete then), a full disk
    char text[700], leftovers[256];
    snprintf(text, sizeof(text), "%s/empty.txt", tmp_dir);
    write_file(text, "", 0);
    snprintf(cmd, sizeof(cmd), "(%s --quiet --vocab %s %s %s/io; ls %s | grep -c '^io_')", prog, vocab, text, tmp_dir,
             tmp_dir);
    run_command(cmd, out, sizeof(out));
    CHECK(strstr(out, "empty.txt is empty: there is no text to tokenize") && strstr(out, "\n0\n"),
          "prepare_data refuses an empty input and writes nothing (%s)", out);
    snprintf(text, sizeof(text), "%s/small.txt", tmp_dir);
    write_file(text, "abc aaa bc\n", 11);
    snprintf(path, sizeof(path), "%s/io2_train.bin", tmp_dir);
    mkdir(path, 0755);
    snprintf(cmd, sizeof(cmd), "(%s --quiet --vocab %s %s %s/io2; ls %s | grep -c '^io2_val')", prog, vocab, text,
             tmp_dir, tmp_dir);
    run_command(cmd, out, sizeof(out));
    CHECK(strstr(out, "io2_train.bin is a directory, not a file") && strstr(out, "\n0\n"),
          "prepare_data refuses an output that is a directory and leaves no val file, temporary or not (%s)", out);
    rmdir(path);
    snprintf(cmd, sizeof(cmd), "(%s --quiet --val-tokens 100 --vocab %s %s %s/io4; echo \"exit $?\"; ls %s | "
             "grep -c '^io4_')", prog, vocab, text, tmp_dir, tmp_dir);
    run_command(cmd, out, sizeof(out));
    CHECK(strstr(out, "no more than --val-tokens 100: the training split would be empty") &&
          strstr(out, "exit 1\n0\n"), "prepare_data with --val-tokens above the text's tokens: exit 1, "
          "no file written (%s)", out);
    snprintf(cmd, sizeof(cmd), "(%s --quiet --val-tokens 2 --vocab %s %s %s/io > /dev/full)", prog, vocab, text, tmp_dir);
    int rc = run_command(cmd, out, sizeof(out));
    snprintf(path, sizeof(path), "%s/io_train.bin", tmp_dir);
    size_t n = 0;
    uint16_t *tokens = rc == 1 ? token_file_load(path, &n) : NULL;
    CHECK(rc == 1 && strstr(out, "stdout: write error") && n > 0,
          "prepare_data with stdout on a full disk: exit 1, the token files complete (%d, %zu tokens: %s)", rc, n, out);
    free(tokens);
    snprintf(cmd, sizeof(cmd), "(%s --quiet --vocab %s %s/io_train.bin %s/io3)", prog, vocab, tmp_dir, tmp_dir);
    rc = run_command(cmd, out, sizeof(out));
    CHECK(rc == 1 && strstr(out, "io_train.bin is an llm.c token file (magic 20240520), not text"),
          "prepare_data refuses a token file as its text (%d: %s)", rc, out);
    snprintf(cmd, sizeof(cmd), "cp %s %s.keep; (trap '' XFSZ; ulimit -f 1; %s --quiet --val-tokens 2 --vocab %s %s %s/io)",
             path, path, prog, vocab, text, tmp_dir);
    ByteBuf big = {0};
    for (int k = 0; k < 4000; k++) bytebuf_append(&big, "abc aaa bc\n", 11);
    write_file(text, big.data, big.len);
    bytebuf_free(&big);
    rc = run_command(cmd, out, sizeof(out));
    snprintf(cmd, sizeof(cmd), "cmp %s %s.keep && ls %s | grep -c 'tmp'", path, path, tmp_dir);
    run_command(cmd, leftovers, sizeof(leftovers));
    CHECK(rc == 1 && strstr(out, "write error") && strcmp(leftovers, "0\n") == 0,
          "prepare_data on a full disk: exit 1, the earlier files intact, no temporary file (%d: %s; %s)", rc, out,
          leftovers);
}

static void test_programs(const char *build, const char *vocab_dir, const char *input) {
    char cmd[4096], out[8192], prog[600], tool[600];
    snprintf(prog, sizeof(prog), "%s/prepare_data", build);
    snprintf(tool, sizeof(tool), "%s/tokenize", build);
    if (!file_exists(prog) || !file_exists(tool)) {
        SKIP("%s or %s not built: the program tests need `make test-build`", prog, tool);
        return;
    }
    if (input) {
        // one thread, and three threads reading 1 MiB blocks (the input is cut mid-stream)
        snprintf(cmd, sizeof(cmd), "%s --quiet --tinyshakespeare --threads 1 --vocab %s %s %s/ts1", prog, vocab_dir,
                 input, tmp_dir);
        int rc = run_command(cmd, out, sizeof(out));
        CHECK(rc == 0 && strstr(out, "32768 tokens") && strstr(out, "305260 tokens"),
              "prepare_data --tinyshakespeare writes 32768 val and 305260 train tokens (%d: %s)", rc, out);
        snprintf(cmd, sizeof(cmd), "%s --quiet --tinyshakespeare --threads 3 --block-mb 1 --vocab %s %s %s/ts3", prog,
                 vocab_dir, input, tmp_dir);
        rc = run_command(cmd, out, sizeof(out));
        char a[600], b[600];
        int same = rc == 0;
        for (int k = 0; k < 2 && same; k++) {
            snprintf(a, sizeof(a), "%s/ts1_%s.bin", tmp_dir, k ? "train" : "val");
            snprintf(b, sizeof(b), "%s/ts3_%s.bin", tmp_dir, k ? "train" : "val");
            same = files_equal(a, b);
        }
        CHECK(same, "prepare_data: 3 threads and 1 MiB blocks write the same files as 1 thread");
        snprintf(a, sizeof(a), "%s/ts1_val.bin", tmp_dir);
        size_t ntok;
        uint16_t *val = token_file_load(a, &ntok);
        CHECK(ntok == 32768 && val[0] == 50256, "val file: %zu tokens, starting with <|endoftext|>", ntok);
        free(val);
        // decode-file gives the text back: the val split is the input's first part, each
        // section behind an <|endoftext|>
        snprintf(cmd, sizeof(cmd), "%s --vocab %s decode-file %s | head -c 40", tool, vocab_dir, a);
        rc = run_command(cmd, out, sizeof(out));
        CHECK(rc == 0 && strncmp(out, "<|endoftext|>First Citizen:\nBefore we", 37) == 0,
              "tokenize decode-file shows the val text (%s)", out);
    } else {
        SKIP("TinyShakespeare not found in $DATA_SRC, ../shared/data or data/: prepare_data not run on it");
    }
    // a file of documents joined by <|endoftext|>, in small blocks with many threads
    char doc_path[600];
    snprintf(doc_path, sizeof(doc_path), "%s/docs.txt", tmp_dir);
    ByteBuf docs = {0};
    for (int d = 0; d < 60000; d++) {
        char line[128];
        int k = snprintf(line, sizeof(line), "Doc %d says:\n  hello\t%d\r\n\n<|endoftext|>", d, d * 7);
        bytebuf_append(&docs, line, (size_t)k);
    }
    write_file(doc_path, docs.data, docs.len);
    snprintf(cmd, sizeof(cmd), "%s --quiet --special --val-tokens 1000 --threads 1 --vocab %s %s %s/d1", prog,
             vocab_dir, doc_path, tmp_dir);
    int rc1 = run_command(cmd, out, sizeof(out));
    snprintf(cmd, sizeof(cmd), "%s --quiet --special --val-tokens 1000 --threads 4 --block-mb 1 --vocab %s %s %s/d4",
             prog, vocab_dir, doc_path, tmp_dir);
    int rc4 = run_command(cmd, out, sizeof(out));
    char a[600], b[600];
    snprintf(a, sizeof(a), "%s/d1_train.bin", tmp_dir);
    snprintf(b, sizeof(b), "%s/d4_train.bin", tmp_dir);
    char c[600], d[600];
    snprintf(c, sizeof(c), "%s/d1_val.bin", tmp_dir);
    snprintf(d, sizeof(d), "%s/d4_val.bin", tmp_dir);
    CHECK(rc1 == 0 && rc4 == 0 && files_equal(a, b) && files_equal(c, d),
          "prepare_data --special: 1 thread, and 4 threads reading 1 MiB blocks, write the same files");
    // the round trip through the files: val + train decode to <|endoftext|> + the text
    snprintf(doc_path, sizeof(doc_path), "%s/docs_eot.txt", tmp_dir);
    ByteBuf eot_docs = {0};
    bytebuf_append(&eot_docs, "<|endoftext|>", 13);
    bytebuf_append(&eot_docs, docs.data, docs.len);
    write_file(doc_path, eot_docs.data, eot_docs.len);
    snprintf(cmd, sizeof(cmd), "(%s --vocab %s decode-file %s/d1_val.bin; %s --vocab %s decode-file %s) | cmp -s - %s",
             tool, vocab_dir, tmp_dir, tool, vocab_dir, a, doc_path);
    CHECK(run_command(cmd, out, sizeof(out)) == 0, "prepare_data output decodes back to the input");
    bytebuf_free(&docs);
    bytebuf_free(&eot_docs);

    // errors: unwritable output folder, missing input, missing vocabulary; nothing written
    snprintf(cmd, sizeof(cmd), "%s --quiet --vocab %s %s/docs.txt /nonexistent/dir/x", prog, vocab_dir, tmp_dir);
    int rc = run_command(cmd, out, sizeof(out));
    CHECK(rc != 0 && strstr(out, "/nonexistent/dir/x"), "prepare_data into a missing folder fails naming it (%s)", out);
    snprintf(cmd, sizeof(cmd), "%s --quiet --vocab %s %s/no-such-input.txt %s/never", prog, vocab_dir, tmp_dir, tmp_dir);
    rc = run_command(cmd, out, sizeof(out));
    snprintf(a, sizeof(a), "%s/never_val.bin", tmp_dir);
    CHECK(rc != 0 && strstr(out, "no-such-input.txt") && !file_exists(a),
          "prepare_data with a missing input fails naming it and writes nothing (%s)", out);
    snprintf(cmd, sizeof(cmd), "%s --quiet --vocab %s %s %s/never", prog, vocab_dir, tmp_dir, tmp_dir);
    rc = run_command(cmd, out, sizeof(out));   // a folder as the input
    char leftovers[256];
    snprintf(cmd, sizeof(cmd), "ls %s | grep -c 'never' ", tmp_dir);
    run_command(cmd, leftovers, sizeof(leftovers));
    CHECK(rc != 0 && strstr(out, "is a directory, not a file") && strcmp(leftovers, "0\n") == 0,
          "prepare_data with a folder as the input fails saying so and leaves no files (%s; %s left)", out, leftovers);
    snprintf(cmd, sizeof(cmd), "%s --quiet --vocab %s/none %s/docs.txt %s/never", prog, tmp_dir, tmp_dir, tmp_dir);
    rc = run_command(cmd, out, sizeof(out));
    CHECK(rc != 0 && strstr(out, "none/vocab.bpe") && !file_exists(a),
          "prepare_data with a missing vocabulary fails naming it and writes nothing (%s)", out);
    // the CLI
    snprintf(cmd, sizeof(cmd), "%s --vocab %s encode \"Hello world\"", tool, vocab_dir);
    rc = run_command(cmd, out, sizeof(out));
    CHECK(rc == 0 && strcmp(out, "15496 995\n") == 0, "tokenize encode (%s)", out);
    snprintf(cmd, sizeof(cmd), "%s --vocab %s decode 15496 995", tool, vocab_dir);
    rc = run_command(cmd, out, sizeof(out));
    CHECK(rc == 0 && strcmp(out, "Hello world") == 0, "tokenize decode (%s)", out);
    snprintf(cmd, sizeof(cmd), "%s --vocab %s decode 15496 50257 995", tool, vocab_dir);
    rc = run_command(cmd, out, sizeof(out));
    CHECK(rc == 1 && strstr(out, "50257") && strstr(out, "out of range"), "tokenize decode refuses id 50257 (%s)", out);
    snprintf(cmd, sizeof(cmd), "%s --tokenizer %s/gpt2_tokenizer.bin decode 15496 995", tool, tmp_dir);
    rc = run_command(cmd, out, sizeof(out));
    CHECK(rc == 0 && strcmp(out, "Hello world") == 0, "tokenize decode with the tokenizer file (%s)", out);
}

int main(void) {
    rng = test_seed();
    if (!mkdtemp(tmp_dir)) die("mkdtemp: %s", strerror(errno));
    test_unicode_version();
    test_tokenizer_file();
    test_synthetic_vocab();
    test_fatal_errors();
    const char *build = getenv("BUILD");
    if (build) test_program_io(build);
    else SKIP("BUILD is not set: the programs' input and output not tested (run through make test)");

    char vocab_buf[600], input_buf[600];
    const char *vocab_file = find_data("gpt2/vocab.bpe", vocab_buf, sizeof(vocab_buf));
    const char *input = find_data("tinyshakespeare/input.txt", input_buf, sizeof(input_buf));
    if (!vocab_file) {
        SKIP("GPT-2 vocabulary not found in $DATA_SRC/gpt2, ../shared/data/gpt2 or data/gpt2: "
             "set DATA_SRC=../shared/data or run make data");
    } else {
        char vocab_dir[600];
        snprintf(vocab_dir, sizeof(vocab_dir), "%s", vocab_file);
        *strrchr(vocab_dir, '/') = 0;
        BPE bpe;
        bpe_load(&bpe, vocab_dir);
        BPEScratch *s[3];
        for (int i = 0; i < 3; i++) s[i] = bpe_scratch_new(&bpe);
        test_gpt2_cases(&bpe, s[0]);
        test_gpt2_random(&bpe, s);
        test_gpt2_tokenizer_file(&bpe);
        if (input) {
            size_t n;
            uint8_t *text = read_file_or_die(input, &n);
            test_tinyshakespeare_in_process(&bpe, s, text, n);
            free(text);
        } else {
            SKIP("TinyShakespeare not found in $DATA_SRC/tinyshakespeare, ../shared/data or data/: "
                 "the 305,260/32,768 check needs it (set DATA_SRC=../shared/data)");
        }
        const char *build = getenv("BUILD");
        if (build) test_programs(build, vocab_dir, input);
        else SKIP("BUILD is not set: prepare_data and tokenize not tested (run through make test)");
        for (int i = 0; i < 3; i++) bpe_scratch_free(s[i]);
        bpe_free(&bpe);
    }
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp_dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", tmp_dir);
    return test_summary();
}
