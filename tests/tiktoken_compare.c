// tests/tiktoken_compare.c: data/bpe.c against ids computed by another encoder (tiktoken, from
// tests/test_tiktoken.py), on a stream of records read from stdin until its end:
//   group, item, text    each a uint32 length (little-endian) and that many bytes
//   n, ids               a uint32 count and that many uint32 ids
// Each text is encoded as tiktoken's encode_ordinary does (<|endoftext|> as text). Records of a
// group come one after the other and each group is one check: it passes when every text in it
// encodes to exactly the ids given. The first few differences of a group are printed.
//
//   build/<variant>/tiktoken_compare VOCAB_DIR < RECORDS
#include <stdlib.h>
#include <string.h>

#include "../data/bpe.h"
#include "../utils.h"
#include "test.h"

#define SHOWN_PER_GROUP 3

typedef struct {
    uint8_t *data;
    size_t len, cap;
} Buf;

// Read one uint32; 0 at a clean end of stdin (before a record's first field), 1 otherwise.
static int read_u32(uint32_t *v, size_t record, int at_start) {
    uint8_t b[4];
    size_t got = fread(b, 1, 4, stdin);
    if (got == 0 && at_start && feof(stdin)) return 0;
    if (got != 4) die("stdin: record %zu is truncated", record);
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return 1;
}

static void buf_reserve(Buf *b, size_t n) {   // room for n bytes and a terminating 0
    if (n + 1 <= b->cap) return;
    b->cap = n + 1;
    b->data = realloc(b->data, b->cap);
    if (!b->data) die("out of memory (%zu bytes)", b->cap);
}

static void read_bytes(Buf *b, uint32_t n, size_t record) {
    buf_reserve(b, n);
    if (n && fread(b->data, 1, n, stdin) != n) die("stdin: record %zu is truncated", record);
    b->data[n] = 0;
    b->len = n;
}

static int read_field(Buf *b, size_t record, int at_start) {
    uint32_t n;
    if (!read_u32(&n, record, at_start)) return 0;
    read_bytes(b, n, record);
    return 1;
}

// The text with printable ASCII as it is and every other byte as \xHH (valid UTF-8 kept whole
// would be unreadable for marks, controls and unassigned code points alike).
static void print_text(const Buf *t) {
    printf("    text \"");
    for (size_t i = 0; i < t->len; i++) {
        uint8_t c = t->data[i];
        if (c == '\\' || c == '"') printf("\\%c", c);
        else if (c >= 0x20 && c < 0x7f) putchar(c);
        else if (c == '\n') printf("\\n");
        else printf("\\x%02x", c);
    }
    printf("\"\n");
}

static void print_ids(const char *what, const int *ids, size_t n) {
    printf("    %s", what);
    for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
    printf("\n");
}

typedef struct {
    Buf name;
    size_t texts, different;
} Group;

static void group_end(Group *g) {
    if (g->texts == 0) return;
    CHECK(g->different == 0, "%s: %zu of %zu texts encode differently from tiktoken", (char *)g->name.data,
          g->different, g->texts);
    g->texts = g->different = 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: tiktoken_compare VOCAB_DIR < RECORDS (see tests/tiktoken_compare.c)\n");
        return 2;
    }
    BPE bpe;
    bpe_load(&bpe, argv[1]);
    BPEScratch *s = bpe_scratch_new(&bpe);
    Group g = {0};
    Buf group = {0}, item = {0}, text = {0};
    int *want = NULL;
    size_t want_cap = 0, records = 0;
    TokenList got = {0};
    while (read_field(&group, records, 1)) {
        read_field(&item, records, 0);
        read_field(&text, records, 0);
        uint32_t n;
        read_u32(&n, records, 0);
        if (n > text.len) die("stdin: record %zu has %u ids for %zu bytes of text", records, n, text.len);
        if (n > want_cap) {
            want_cap = n;
            want = realloc(want, want_cap * sizeof(int));
            if (!want) die("out of memory reading record %zu", records);
        }
        for (uint32_t i = 0; i < n; i++) {
            uint32_t id;
            read_u32(&id, records, 0);
            want[i] = (int)id;
        }
        if (!g.name.data || strcmp((char *)g.name.data, (char *)group.data) != 0) {
            group_end(&g);
            buf_reserve(&g.name, group.len);
            memcpy(g.name.data, group.data, group.len + 1);
            g.name.len = group.len;
        }
        got.len = 0;
        bpe_encode(&bpe, s, text.data, text.len, 0, &got);
        g.texts++;
        if (got.len != n || memcmp(got.ids, want, n * sizeof(int)) != 0) {
            if (g.different++ < SHOWN_PER_GROUP) {
                printf("  %s, %s:\n", (char *)group.data, (char *)item.data);
                print_text(&text);
                print_ids("tiktoken", want, n);
                print_ids("ours    ", got.ids, got.len);
            }
        }
        records++;
    }
    group_end(&g);
    if (records == 0) die("stdin: no records");
    printf("tiktoken_compare: %zu texts compared\n", records);
    tokenlist_free(&got);
    free(want);
    free(group.data); free(item.data); free(text.data); free(g.name.data);
    bpe_scratch_free(s);
    bpe_free(&bpe);
    return test_summary_named("tiktoken_compare");
}
