// data/tokenize.c: the GPT-2 tokenizer on the command line, for users and tests.
//   ./tokenize encode "Hello world"          -> 15496 995
//   ./tokenize decode 15496 995              -> Hello world
//   ./tokenize tokens "Hello world"          -> one token per line: id and its bytes
//   ./tokenize decode-file data/tinyshakespeare/tiny_shakespeare_val.bin
//   ./tokenize export-tokenizer data/gpt2_tokenizer.bin
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"
#include "bpe.h"
#include "tokenizer.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: tokenize [options] COMMAND [ARGS]\n"
            "commands:\n"
            "  encode [TEXT]            print the ids of TEXT (of --input or stdin when absent)\n"
            "  tokens [TEXT]            like encode, one token a line: id, tab, its bytes quoted\n"
            "  decode [ID...]           print the bytes of the ids (ids from --input or stdin when\n"
            "                           absent; separated by spaces, commas or newlines)\n"
            "  decode-file FILE         print the text of an llm.c token file (magic 20240520)\n"
            "  export-tokenizer FILE    write the llm.c tokenizer file (magic 20240328)\n"
            "options:\n"
            "  --vocab DIR              folder with vocab.bpe and encoder.json (default data/gpt2)\n"
            "  --tokenizer FILE         decode with an llm.c tokenizer file instead of --vocab\n"
            "  --input FILE             read the text or ids from FILE\n"
            "  --special                encode the text <|endoftext|> as its id (default: as text)\n"
            "  --threads N              encoder threads (default 1)\n"
            "  -h, --help               this text\n");
}

typedef struct {
    const char *vocab_dir, *tokenizer_path, *input_path;
    int special, threads;
} Options;

#define STDIN_HINT "give the text or ids as arguments, or --input FILE"

static uint8_t *read_stdin(size_t *n) {
    stdin_readable_or_die(STDIN_HINT);
    ByteBuf b = {0};
    uint8_t chunk[1 << 16];
    size_t got;
    while ((got = fread(chunk, 1, sizeof(chunk), stdin)) > 0) bytebuf_append(&b, chunk, got);
    if (ferror(stdin)) die("stdin: read error: %s", strerror(errno));
    uint8_t zero = 0;
    bytebuf_append(&b, &zero, 1);
    *n = b.len - 1;
    return b.data;
}

// The input text: the arguments joined by spaces, else --input, else stdin.
static uint8_t *input_text(const Options *o, int argc, char **argv, size_t *n) {
    if (argc > 0) {
        ByteBuf b = {0};
        for (int i = 0; i < argc; i++) {
            if (i) bytebuf_append(&b, " ", 1);
            bytebuf_append(&b, argv[i], strlen(argv[i]));
        }
        uint8_t zero = 0;
        bytebuf_append(&b, &zero, 1);
        *n = b.len - 1;
        return b.data;
    }
    if (o->input_path) return read_file_or_die(o->input_path, n);
    return read_stdin(n);
}

static void write_stdout(const void *p, size_t n) {
    if (n && fwrite(p, 1, n, stdout) != n) die("stdout: write error: %s", strerror(errno));
}

static void cmd_encode(const Options *o, int argc, char **argv, int one_per_line) {
    BPE bpe;
    bpe_load(&bpe, o->vocab_dir);
    size_t n;
    uint8_t *text = input_text(o, argc, argv, &n);
    BPEScratch **scratch = malloc((size_t)o->threads * sizeof(BPEScratch *));
    if (!scratch) die("out of memory");
    for (int t = 0; t < o->threads; t++) scratch[t] = bpe_scratch_new(&bpe);
    TokenList ids = {0};
    bpe_encode_parallel(&bpe, scratch, o->threads, text, n, o->special, &ids);
    for (size_t i = 0; i < ids.len; i++) {
        if (one_per_line) {
            size_t len;
            const uint8_t *tok = tokenizer_token(&bpe.tokenizer, ids.ids[i], &len);
            printf("%d\t\"", ids.ids[i]);
            for (size_t k = 0; k < len; k++) {
                uint8_t c = tok[k];
                if (c == '"' || c == '\\') printf("\\%c", c);
                else if (c == '\n') printf("\\n");
                else if (c == '\t') printf("\\t");
                else if (c == '\r') printf("\\r");
                else if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
                else putchar(c);   // bytes >= 0x80 as they are, so UTF-8 shows as text
            }
            printf("\"\n");
        } else {
            printf(i ? " %d" : "%d", ids.ids[i]);
        }
    }
    if (!one_per_line) printf("\n");
    stdout_flush_or_die();
    for (int t = 0; t < o->threads; t++) bpe_scratch_free(scratch[t]);
    free(scratch);
    tokenlist_free(&ids);
    free(text);
    bpe_free(&bpe);
}

// The decoding table: an llm.c tokenizer file when given, else the one built from the vocabulary.
static void load_decoder(const Options *o, Tokenizer *t) {
    if (o->tokenizer_path) {
        tokenizer_load(t, o->tokenizer_path);
        return;
    }
    BPE bpe;
    bpe_load(&bpe, o->vocab_dir);
    *t = bpe.tokenizer;                   // take the table over, free the rest
    memset(&bpe.tokenizer, 0, sizeof(bpe.tokenizer));
    bpe_free(&bpe);
}

static void decode_or_die(const Tokenizer *t, const int *ids, size_t n, const char *source) {
    ByteBuf out = {0};
    size_t bad;
    if (tokenizer_decode(t, ids, n, &out, &bad) != 0) {
        write_stdout(out.data, out.len);
        stdout_flush_or_die();
        die("%s: token id %d (the %zu-th) is out of range: the vocabulary has ids 0 to %d", source, ids[bad],
            bad + 1, t->vocab_size - 1);
    }
    write_stdout(out.data, out.len);
    stdout_flush_or_die();
    bytebuf_free(&out);
}

static void cmd_decode(const Options *o, int argc, char **argv) {
    Tokenizer t;
    load_decoder(o, &t);
    TokenList ids = {0};
    const char *source = "arguments";
    uint8_t *text = NULL;
    if (argc > 0) {
        for (int i = 0; i < argc; i++) tokenlist_push(&ids, (int)parse_long("decode", argv[i], 0, INT32_MAX));
    } else {
        size_t n;
        source = o->input_path ? o->input_path : "stdin";
        text = o->input_path ? read_file_or_die(o->input_path, &n) : read_stdin(&n);
        const char *p = (const char *)text;
        while (1) {
            while (*p && (isspace((unsigned char)*p) || *p == ',')) p++;
            if (!*p) break;
            char *end;
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p || errno || v < 0 || v > INT32_MAX || (*end && !isspace((unsigned char)*end) && *end != ','))
                die("%s: '%.20s' is not a token id", source, p);
            tokenlist_push(&ids, (int)v);
            p = end;
        }
    }
    decode_or_die(&t, ids.ids, ids.len, source);
    free(text);
    tokenlist_free(&ids);
    tokenizer_free(&t);
}

static void cmd_decode_file(const Options *o, const char *path) {
    Tokenizer t;
    load_decoder(o, &t);
    size_t n;
    uint16_t *tokens = token_file_load(path, &n);
    int *ids = malloc((n ? n : 1) * sizeof(int));
    if (!ids) die("out of memory for %zu tokens", n);
    for (size_t i = 0; i < n; i++) ids[i] = tokens[i];
    decode_or_die(&t, ids, n, path);
    free(ids);
    free(tokens);
    tokenizer_free(&t);
}

static void cmd_export(const Options *o, const char *path) {
    BPE bpe;
    bpe_load(&bpe, o->vocab_dir);
    tokenizer_save(&bpe.tokenizer, path);
    fprintf(stderr, "wrote %s: %d tokens, <|endoftext|> = %d\n", path, bpe.tokenizer.vocab_size, bpe.eot_token);
    bpe_free(&bpe);
}

// the options, then the command and its arguments (argv's own pointers) into *args
static Options parse_options(int argc, char **argv, char ***args, int *nargs) {
    Options o = {"data/gpt2", NULL, NULL, 0, 1};
    Flag flags[] = {
        TEXT_FLAG("--vocab", &o.vocab_dir), TEXT_FLAG("--tokenizer", &o.tokenizer_path),
        TEXT_FLAG("--input", &o.input_path), SWITCH_FLAG("--special", &o.special),
        INT_FLAG("--threads", &o.threads, 1, 256)};
    *args = malloc((size_t)argc * sizeof(char *));
    if (!*args) die("out of memory for the arguments");
    *nargs = parse_flags(argc, argv, flags, (int)(sizeof(flags) / sizeof(flags[0])), "tokenize", usage,
                         *args, FLAGS_THEN_REST);
    if (*nargs == 0) {
        usage(stderr);
        die("give a command: encode, tokens, decode, decode-file or export-tokenizer");
    }
    return o;
}

int main(int argc, char **argv) {
    char **argl;
    int nargs;
    Options o = parse_options(argc, argv, &argl, &nargs);
    const char *cmd = argl[0];
    int rest = nargs - 1;
    char **args = argl + 1;
    if (strcmp(cmd, "encode") == 0) cmd_encode(&o, rest, args, 0);
    else if (strcmp(cmd, "tokens") == 0) cmd_encode(&o, rest, args, 1);
    else if (strcmp(cmd, "decode") == 0) cmd_decode(&o, rest, args);
    else if (strcmp(cmd, "decode-file") == 0 && rest == 1) cmd_decode_file(&o, args[0]);
    else if (strcmp(cmd, "export-tokenizer") == 0 && rest == 1) cmd_export(&o, args[0]);
    else if (strcmp(cmd, "decode-file") == 0 || strcmp(cmd, "export-tokenizer") == 0)
        die("tokenize %s takes one FILE, not %d arguments (see tokenize --help)", cmd, rest);
    else die("unknown command '%s': encode, tokens, decode, decode-file or export-tokenizer (see tokenize --help)", cmd);
    free(argl);
    return 0;
}
