// data/tokenizer.h: llm.c's two file formats for tokens, and decoding (ids -> bytes).
//
//   tokenizer file (magic 20240328): the bytes of every token id, so a program can turn ids
//     back into text without the GPT-2 vocabulary files or a regex library. llm.c reads and
//     writes the same file, so the two projects decode each other's outputs.
//   token file (magic 20240520): a header of 256 int32 then uint16 token ids; what
//     prepare_data writes and the dataloader reads.
// docs/FORMATS.md gives both layouts byte by byte. Encoding (text -> ids) needs the BPE merges
// and the GPT-2 split regex: see data/bpe.h. Nothing here depends on anything but libc, so every
// program (train_gpt2 on a GPU machine included) can link it.
//
// Parsers work on bytes in memory and report problems through err (they never exit), so they
// can be fuzzed; the *_load functions wrap them and die with a message naming the file.
#ifndef TOKENIZER_H
#define TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_HEADER_INTS 256
#define TOKEN_FILE_MAGIC 20240520
#define TOKEN_FILE_VERSION 1          // version 1: uint16 tokens (version 2 is llm.c's uint32, Llama 3)
#define TOKEN_FILE_HEADER_INTS 256
#define TOKEN_FILE_HEADER_BYTES (TOKEN_FILE_HEADER_INTS * sizeof(int32_t))

typedef struct {
    int vocab_size;
    int eot_token;          // id of <|endoftext|>, or -1 when the vocabulary has none
    uint32_t *offsets;      // (vocab_size + 1): token i is bytes[offsets[i] .. offsets[i+1])
    uint8_t *bytes;         // every token's bytes, back to back; tokens may contain NUL bytes
} Tokenizer;

// A growable byte buffer (decode output).
typedef struct {
    uint8_t *data;
    size_t len, cap;
} ByteBuf;
void bytebuf_append(ByteBuf *b, const void *src, size_t n);
void bytebuf_free(ByteBuf *b);

// Build a tokenizer from a table of token byte strings (copied). Every token must be 1 to 255
// bytes long, the limit of the file format's length byte. Returns 0, or -1 with a reason in err.
int tokenizer_from_table(Tokenizer *t, int vocab_size, int eot_token, const uint8_t *const *token,
                         const size_t *token_len, char *err, size_t err_len);
// Parse the bytes of a tokenizer file (versions 1 and 2). Returns 0, or -1 with a reason in err.
int tokenizer_parse(Tokenizer *t, const uint8_t *data, size_t n, char *err, size_t err_len);
// Read a tokenizer file; dies with "<path>: <reason>" when it is missing or malformed.
void tokenizer_load(Tokenizer *t, const char *path);
// Write a version-2 tokenizer file atomically (a crash leaves any earlier file intact).
void tokenizer_save(const Tokenizer *t, const char *path);
void tokenizer_free(Tokenizer *t);

// The bytes of one token, or NULL when id is outside [0, vocab_size).
const uint8_t *tokenizer_token(const Tokenizer *t, int id, size_t *len);
// Append the bytes of ids[0..n) to out. Returns 0, or -1 with *bad_index set to the position of
// the first id outside the vocabulary (out then holds the bytes of the ids before it).
int tokenizer_decode(const Tokenizer *t, const int *ids, size_t n, ByteBuf *out, size_t *bad_index);

// Token files. The header is little-endian int32: [0] magic, [1] version, [2] token count.
void token_file_header_init(int32_t header[TOKEN_FILE_HEADER_INTS], size_t ntokens);
// Check a header against the size of the whole file in bytes; on success *ntokens is the token
// count. Returns 0, or -1 with a reason in err.
int token_file_check(const int32_t header[TOKEN_FILE_HEADER_INTS], uint64_t file_bytes,
                     size_t *ntokens, char *err, size_t err_len);
// Parse a whole token file held in memory: tokens are copied into a fresh array (*tokens,
// free() it). Returns 0, or -1 with a reason in err.
int token_file_parse(const uint8_t *data, size_t n, uint16_t **tokens, size_t *ntokens,
                     char *err, size_t err_len);
// Read a token file; dies with "<path>: <reason>" when it is missing or malformed.
uint16_t *token_file_load(const char *path, size_t *ntokens);

#endif
