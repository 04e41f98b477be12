// data/prepare_data.c: a text file -> llm.c token files (train and val) with GPT-2's tokenizer.
//
//   ./prepare_data --tinyshakespeare data/tinyshakespeare/input.txt data/tinyshakespeare/tiny_shakespeare
//   writes tiny_shakespeare_val.bin (the first 32,768 tokens) and tiny_shakespeare_train.bin.
//
// --tinyshakespeare is llm.c's dev/data/tinyshakespeare.py exactly: the text is split on "\n\n",
// each section is encoded on its own with an <|endoftext|> before it, and every section but the
// last keeps its "\n\n" (llm.c adds it back). Without it the whole file is one document with one
// <|endoftext|> in front; --special treats <|endoftext|> written in the text as the token, for
// files of documents already joined that way.
//
// The input is read in blocks, so files of any size stream through in bounded memory (the
// longest stretch without a newline must fit). Each block is cut where the encoding provably
// does not depend on the cut (see bpe_find_cut), and the parts are encoded on --threads threads;
// the output is identical for every thread count. Both files are written atomically.
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../utils.h"
#include "bpe.h"
#include "tokenizer.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: prepare_data [options] INPUT OUT_PREFIX\n"
            "  Tokenizes INPUT with GPT-2's tokenizer into OUT_PREFIX_val.bin (the first\n"
            "  --val-tokens tokens) and OUT_PREFIX_train.bin (the rest), llm.c token files.\n"
            "options:\n"
            "  --tinyshakespeare   llm.c's TinyShakespeare preparation (same as --sections '\\n\\n')\n"
            "  --sections SEP      an <|endoftext|> before each section of the text split on SEP\n"
            "                      (escapes \\n \\t \\\\); sections keep their SEP, as llm.c does.\n"
            "                      Default: the whole file is one document, one <|endoftext|> first\n"
            "  --special           the text <|endoftext|> in INPUT is the end-of-text token\n"
            "  --val-tokens N      size of the validation split (default 32768)\n"
            "  --vocab DIR         folder with vocab.bpe and encoder.json (default data/gpt2)\n"
            "  --threads N         encoder threads (default: the number of CPUs)\n"
            "  --block-mb N        read size in MiB (default 64)\n"
            "  --quiet             no progress bar\n"
            "  -h, --help          this text\n");
}

typedef struct {
    const char *input, *prefix, *vocab_dir;
    char separator[64];
    size_t separator_len;       // 0: no sections
    int special, threads, quiet;
    size_t val_tokens, block;
} Options;

// ---- work items ------------------------------------------------------------------------------

// A stretch of the buffer to encode: text[begin, end), the regex seeing up to subject_end, with
// an <|endoftext|> before it when it starts a section.
typedef struct {
    size_t begin, end, subject_end;
    int eot_before;
} Item;

typedef struct {
    Item *items;
    size_t len, cap;
} ItemList;

static void item_push(ItemList *l, Item it) {
    if (l->len == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->items = realloc(l->items, l->cap * sizeof(Item));
        if (!l->items) die("out of memory for %zu work items", l->cap);
    }
    l->items[l->len++] = it;
}

typedef struct {
    const BPE *bpe;
    BPEScratch *scratch;
    const uint8_t *text;
    const Item *items;
    size_t n_items;
    int special;
    TokenList out;
} Worker;

static void *work(void *arg) {
    Worker *w = arg;
    w->out.len = 0;
    for (size_t i = 0; i < w->n_items; i++) {
        const Item *it = &w->items[i];
        if (it->eot_before) tokenlist_push(&w->out, w->bpe->eot_token);
        bpe_encode_range(w->bpe, w->scratch, w->text, it->subject_end, it->begin, it->end, w->special, &w->out);
    }
    return NULL;
}

// ---- output ----------------------------------------------------------------------------------

typedef struct {
    AtomicFile val, train;
    size_t val_target, n_val, n_train;
    uint16_t *chunk;            // conversion buffer
    size_t chunk_cap;
} Output;

static void output_open(Output *o, const char *prefix, size_t val_target) {
    char path[4096];
    int32_t header[TOKEN_FILE_HEADER_INTS] = {0};   // rewritten with the counts at the end
    snprintf(path, sizeof(path), "%s_val.bin", prefix);
    atomic_open(&o->val, path);
    snprintf(path, sizeof(path), "%s_train.bin", prefix);
    atomic_open(&o->train, path);
    atomic_write(&o->val, header, sizeof(header));
    atomic_write(&o->train, header, sizeof(header));
    o->val_target = val_target;
    o->n_val = o->n_train = 0;
    o->chunk_cap = 1 << 16;
    o->chunk = malloc(o->chunk_cap * sizeof(uint16_t));
    if (!o->chunk) die("out of memory");
}

static void output_abort(Output *o) {
    atomic_abort(&o->val);
    atomic_abort(&o->train);
}

static void output_tokens(Output *o, const int *ids, size_t n) {
    while (n > 0) {
        int to_val = o->n_val < o->val_target;
        size_t room = to_val ? o->val_target - o->n_val : n;
        size_t k = n < room ? n : room;
        if (k > o->chunk_cap) k = o->chunk_cap;
        for (size_t i = 0; i < k; i++) o->chunk[i] = (uint16_t)ids[i];   // ids < vocab <= 65536
        atomic_write(to_val ? &o->val : &o->train, o->chunk, k * sizeof(uint16_t));
        if (to_val) o->n_val += k;
        else o->n_train += k;
        if (o->n_train > INT32_MAX) {
            output_abort(o);
            die("more than %d tokens: too many for one llm.c token file (its count is an int32)", INT32_MAX);
        }
        ids += k;
        n -= k;
    }
}

static void output_commit(Output *o) {
    AtomicFile *files[2] = {&o->val, &o->train};
    size_t counts[2] = {o->n_val, o->n_train};
    for (int i = 0; i < 2; i++) {
        int32_t header[TOKEN_FILE_HEADER_INTS];
        token_file_header_init(header, counts[i]);
        if (fseek(files[i]->f, 0, SEEK_SET) != 0) {
            output_abort(o);
            die("%s: cannot seek", files[i]->tmp_path);
        }
        atomic_write(files[i], header, sizeof(header));
    }
    atomic_commit(&o->val);
    atomic_commit(&o->train);
    free(o->chunk);
}

// ---- progress ----------------------------------------------------------------------------------

static void progress(const Options *opt, size_t done, long total, size_t tokens, double t0, int final) {
    if (opt->quiet || !isatty(2)) return;
    double dt = wall_seconds() - t0, frac = total > 0 ? (double)done / (double)total : 0.0;
    if (frac > 1.0) frac = 1.0;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    char d[32], t[32];
    format_bytes(d, sizeof(d), (double)done);
    format_bytes(t, sizeof(t), (double)(total > 0 ? total : 0));
    fprintf(stderr, "\r[%s] %5.1f%%  %s / %s  %.1f MB/s  %zu tokens%s", bar, 100.0 * frac, d, t,
            dt > 0 ? done / dt / 1e6 : 0.0, tokens, final ? "\n" : "");
}

// ---- main loop ---------------------------------------------------------------------------------

// Cut the unprocessed part of the buffer into items. Returns how many bytes they cover; the rest
// waits for more input. *at_section_start says whether an <|endoftext|> is due before the next
// text, and carries over between calls.
static size_t make_items(const Options *o, const uint8_t *buf, size_t len, int eof, int *at_section_start,
                         ItemList *items) {
    size_t pos = 0;
    while (1) {
        const uint8_t *sep = o->separator_len ? memmem(buf + pos, len - pos, o->separator, o->separator_len) : NULL;
        if (sep) {
            size_t end = (size_t)(sep - buf) + o->separator_len;
            item_push(items, (Item){pos, end, end, *at_section_start});
            *at_section_start = o->separator_len > 0;
            pos = end;
            continue;
        }
        if (eof) {
            if (pos < len || *at_section_start) item_push(items, (Item){pos, len, len, *at_section_start});
            *at_section_start = 0;
            return len;
        }
        // More text follows: stop at the last cut that no separator or <|endoftext|> can straddle
        // (those starting within reserve bytes of the end are not fully read yet).
        size_t reserve = o->separator_len ? o->separator_len - 1 : 0;
        if (o->special && reserve < sizeof(BPE_EOT_TEXT) - 1) reserve = sizeof(BPE_EOT_TEXT) - 1;
        size_t limit = len > reserve ? len - reserve : 0;
        size_t cut = bpe_find_last_cut(buf, len, pos, limit);
        if (cut > pos) {
            item_push(items, (Item){pos, cut, len, *at_section_start});
            *at_section_start = 0;
            pos = cut;
        }
        return pos;
    }
}

// Split items longer than max_len at cuts, so that no thread gets one huge piece of work.
static void split_long_items(const uint8_t *buf, ItemList *in, ItemList *out, size_t max_len) {
    out->len = 0;
    for (size_t i = 0; i < in->len; i++) {
        Item it = in->items[i];
        while (it.end - it.begin > max_len) {
            size_t cut = bpe_find_cut(buf, it.subject_end, it.begin + max_len, it.end);
            if (cut >= it.end) break;
            item_push(out, (Item){it.begin, cut, it.subject_end, it.eot_before});
            it.begin = cut;
            it.eot_before = 0;
        }
        item_push(out, it);
    }
}

static void encode_items(const BPE *bpe, Worker *workers, int threads, const uint8_t *buf, const ItemList *items,
                         int special) {
    size_t total = 0;
    for (size_t i = 0; i < items->len; i++) total += items->items[i].end - items->items[i].begin;
    // contiguous runs of items of about equal bytes, one per thread, so the output stays in order
    size_t next = 0;
    for (int t = 0; t < threads; t++) {
        size_t first = next, bytes = 0, share = total / (size_t)threads + 1;
        while (next < items->len && (t == threads - 1 || bytes < share)) {
            bytes += items->items[next].end - items->items[next].begin;
            next++;
        }
        workers[t].bpe = bpe;
        workers[t].text = buf;
        workers[t].items = items->items + first;
        workers[t].n_items = next - first;
        workers[t].special = special;
    }
    pthread_t tid[256];
    for (int t = 1; t < threads; t++)
        if (pthread_create(&tid[t], NULL, work, &workers[t]) != 0) die("cannot start an encoder thread");
    work(&workers[0]);
    for (int t = 1; t < threads; t++) pthread_join(tid[t], NULL);
}

// an llm.c file given as the text (a token file for its source, say) would tokenize as garbage
static void refuse_llmc_file(const uint8_t *start, const char *path) {
    int32_t magic;
    memcpy(&magic, start, sizeof(magic));
    if (magic == TOKEN_FILE_MAGIC || magic == TOKENIZER_MAGIC)
        die("%s is an llm.c %s file (magic %d), not text to tokenize", path,
            magic == TOKEN_FILE_MAGIC ? "token" : "tokenizer", magic);
}

static void parse_separator(Options *o, const char *text) {
    size_t n = 0;
    for (const char *p = text; *p; p++) {
        char c = *p;
        if (c == '\\' && p[1]) {
            p++;
            c = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p == 'r' ? '\r' : *p == '\\' ? '\\' : 0;
            if (!c) die("--sections: unknown escape \\%c (use \\n \\t \\r \\\\)", *p);
        }
        if (n + 1 >= sizeof(o->separator)) die("--sections: separator longer than %zu bytes", sizeof(o->separator) - 1);
        o->separator[n++] = c;
    }
    if (n == 0) die("--sections: empty separator");
    o->separator_len = n;
}

static Options parse_options(int argc, char **argv) {
    Options o = {0};
    o.vocab_dir = "data/gpt2";
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    o.threads = cpus < 1 ? 1 : cpus > 64 ? 64 : (int)cpus;
    int tinyshakespeare = 0;
    const char *sections = NULL;
    long val_tokens = 32768, block_mb = 64;
    Flag flags[] = {
        SWITCH_FLAG("--tinyshakespeare", &tinyshakespeare), TEXT_FLAG("--sections", &sections),
        SWITCH_FLAG("--special", &o.special), SWITCH_FLAG("--quiet", &o.quiet),
        LONG_FLAG("--val-tokens", &val_tokens, 0, INT32_MAX), TEXT_FLAG("--vocab", &o.vocab_dir),
        INT_FLAG("--threads", &o.threads, 1, 256), LONG_FLAG("--block-mb", &block_mb, 1, 4096)};
    char *files[2];
    int n = parse_flags(argc, argv, flags, (int)(sizeof(flags) / sizeof(flags[0])), "prepare_data",
                        usage, files, 2);
    if (n != 2) {
        usage(stderr);
        die("give the INPUT text file and the OUT_PREFIX of the token files");
    }
    if (tinyshakespeare && sections) die("flags --tinyshakespeare and --sections: give one (--tinyshakespeare is --sections '\\n\\n')");
    if (tinyshakespeare) parse_separator(&o, "\\n\\n");
    if (sections) parse_separator(&o, sections);
    o.val_tokens = (size_t)val_tokens;
    o.block = (size_t)block_mb << 20;
    o.input = files[0];
    o.prefix = files[1];
    return o;
}

int main(int argc, char **argv) {
    Options o = parse_options(argc, argv);

    double t0 = wall_seconds();
    BPE bpe;
    bpe_load(&bpe, o.vocab_dir);
    if (bpe.tokenizer.vocab_size > 65536)
        die("%s: %d tokens do not fit the uint16 ids of a version-1 token file", o.vocab_dir, bpe.tokenizer.vocab_size);
    FILE *in = fopen_or_die(o.input, "rb");
    struct stat st;
    long total = fstat(fileno(in), &st) == 0 && S_ISREG(st.st_mode) ? (long)st.st_size : -1;
    // until committed, whatever ends the program early (die() included) removes the output's
    // temporary files (utils.c: every open AtomicFile), so a failed run leaves nothing behind
    Output out = {0};
    output_open(&out, o.prefix, o.val_tokens);   // fails before any work when the folder is unwritable

    Worker *workers = calloc((size_t)o.threads, sizeof(Worker));
    if (!workers) die("out of memory");
    for (int t = 0; t < o.threads; t++) workers[t].scratch = bpe_scratch_new(&bpe);
    size_t cap = o.block * 2, len = 0, bytes_read = 0, tokens = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) die("out of memory for a %zu-byte read buffer", cap);
    ItemList items = {0}, split = {0};
    int eof = 0, at_section_start = 1;
    double encode_s = 0.0;   // time in the encoder alone
    while (!eof) {
        if (cap - len < o.block) {   // a long stretch without a cut: grow
            cap = 2 * cap;
            buf = realloc(buf, cap);
            if (!buf) die("out of memory for a %zu-byte read buffer", cap);
        }
        size_t got = fread(buf + len, 1, o.block, in);
        if (got < o.block) {
            if (ferror(in)) die("%s: read error: %s", o.input, strerror(errno));   // the output is removed at exit
            eof = 1;
        }
        if (bytes_read == 0 && got >= 4) refuse_llmc_file(buf + len, o.input);
        len += got;
        bytes_read += got;
        items.len = 0;
        size_t used = make_items(&o, buf, len, eof, &at_section_start, &items);
        split_long_items(buf, &items, &split, o.block / (4 * (size_t)o.threads) + 4096);
        double e0 = wall_seconds();
        encode_items(&bpe, workers, o.threads, buf, &split, o.special);
        encode_s += wall_seconds() - e0;
        for (int t = 0; t < o.threads; t++) {
            output_tokens(&out, workers[t].out.ids, workers[t].out.len);
            tokens += workers[t].out.len;
        }
        memmove(buf, buf + used, len - used);
        len -= used;
        progress(&o, bytes_read, total, tokens, t0, eof);
    }
    fclose(in);
    if (bytes_read == 0) die("%s is empty: there is no text to tokenize", o.input);   // the output is removed at exit
    if (out.n_train == 0)   // the output is removed at exit
        die("%s is %zu tokens, no more than --val-tokens %zu: the training split would be empty "
            "(nothing written); give a smaller --val-tokens", o.input, tokens, o.val_tokens);
    output_commit(&out);
    double dt = wall_seconds() - t0;
    size_t pieces = 0, hits = 0;
    for (int t = 0; t < o.threads; t++) {
        size_t p, h;
        bpe_scratch_stats(workers[t].scratch, &p, &h);
        pieces += p;
        hits += h;
        bpe_scratch_free(workers[t].scratch);
        tokenlist_free(&workers[t].out);
    }
    printf("%s: %zu bytes -> %zu tokens; encoding %.3f s (%.1f MB/s on %d thread%s, %.1f%% of pieces from the "
           "cache), %.2f s in all\n", o.input, bytes_read, tokens, encode_s,
           encode_s > 0 ? bytes_read / encode_s / 1e6 : 0.0, o.threads, o.threads == 1 ? "" : "s",
           pieces ? 100.0 * hits / pieces : 0.0, dt);
    printf("wrote %s: %zu tokens, %zu bytes\n", out.val.path, out.n_val, TOKEN_FILE_HEADER_BYTES + 2 * out.n_val);
    printf("wrote %s: %zu tokens, %zu bytes\n", out.train.path, out.n_train, TOKEN_FILE_HEADER_BYTES + 2 * out.n_train);
    stdout_flush_or_die();   // the files are complete; this says the report was lost
    free(workers);
    free(buf);
    free(items.items);
    free(split.items);
    bpe_free(&bpe);
    return 0;
}
