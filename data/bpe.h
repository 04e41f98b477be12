// data/bpe.h: the GPT-2 encoder, text -> token ids, exactly as OpenAI's encoder.py, tiktoken
// and Hugging Face produce them.
//
// Encoding is two steps. (1) The pre-tokenizer splits the text into pieces with GPT-2's regex
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// run by PCRE2, JIT-compiled (\s written \p{White_Space}, the meaning it has in Python's `regex`,
// which GPT-2 used: see bpe.c). Letter and number classes come from PCRE2's Unicode tables, which
// must be the version tiktoken's are (BPE_UNICODE_VERSION): with older ones, characters assigned
// since (Debian 12's PCRE2 10.42 has Unicode 14: CJK extension H, Nag Mundari...) are neither
// letters nor numbers, and "\U0001E4D0's" ends [..., 6, 82] instead of [..., 338]. The build links
// PCRE2 10.46 (scripts/build_pcre2.sh), whose tables are Unicode 16. (2) Each piece's bytes are
// merged by byte-level BPE: repeatedly join the adjacent pair that comes first in vocab.bpe,
// leftmost first among equals, until no listed pair is left. The ids are encoder.json's.
// <|endoftext|> (id 50256) is produced only when the caller allows special tokens.
//
// Arbitrary bytes are accepted: bytes that are not valid UTF-8 match no regex class, so each run
// of them becomes a piece of its own, and every byte has a token, so decode(encode(x)) == x.
//
// A BPE is read-only once loaded and may be shared between threads; each thread encodes with its
// own BPEScratch (regex match state, a cache of recently encoded pieces, work arrays). Memory:
// about 40 bytes per byte of the longest piece (one run of letters, say) besides the output.
#ifndef BPE_H
#define BPE_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

#define BPE_EOT_TEXT "<|endoftext|>"
// The Unicode version of tiktoken's character tables (those of Rust's regex-syntax, which
// tiktoken 0.14 runs GPT-2's pattern with); the linked PCRE2's must be the same.
#define BPE_UNICODE_VERSION "16.0.0"

typedef struct {
    Tokenizer tokenizer;      // id -> bytes for every id, <|endoftext|> included
    int eot_token;            // id of <|endoftext|> (50256 for GPT-2)
    int byte_token[256];      // id of each single-byte token
    int n_merges;
    // merge of rank r (line r+1 of vocab.bpe): ids merge_left[r], merge_right[r] -> merge_result[r]
    int *merge_left, *merge_right, *merge_result;
    // hash table (left id, right id) -> rank, open addressing, pair_mask + 1 slots
    uint64_t *pair_keys;      // (left << 32 | right), or PAIR_EMPTY
    int32_t *pair_rank;
    size_t pair_mask;
    void *regex;              // pcre2_code *, JIT-compiled when PCRE2 offers a JIT
    int regex_jit;            // 1 when the JIT compile succeeded
} BPE;

typedef struct BPEScratch BPEScratch;

// A growable list of token ids (encode output).
typedef struct {
    int *ids;
    size_t len, cap;
} TokenList;
void tokenlist_push(TokenList *t, int id);
void tokenlist_free(TokenList *t);

// Build the encoder from the contents of vocab.bpe (merges) and encoder.json (token -> id),
// checking each against the other: every merge's two parts and their concatenation are tokens,
// every merge uses only bytes or tokens made by earlier merges, and every token is either one
// byte, the result of exactly one merge, or <|endoftext|>. Returns 0, or -1 with a reason in err.
int bpe_parse(BPE *bpe, const char *merges, size_t merges_len, const char *encoder_json,
              size_t json_len, char *err, size_t err_len);
// Load <dir>/vocab.bpe and <dir>/encoder.json; dies with a message naming the file at fault.
void bpe_load(BPE *bpe, const char *dir);
void bpe_free(BPE *bpe);

// The Unicode version of the linked PCRE2's tables, e.g. "16.0.0", into out (24 bytes or more).
void bpe_unicode_version(char *out, size_t cap);

BPEScratch *bpe_scratch_new(const BPE *bpe);
void bpe_scratch_free(BPEScratch *s);
// pieces encoded so far and how many of them the cache answered
void bpe_scratch_stats(const BPEScratch *s, size_t *pieces, size_t *cache_hits);

// Append the ids of text[0, n) to out. allow_special: the literal text <|endoftext|> becomes
// id eot_token; otherwise it is ordinary text (tiktoken's encode_ordinary).
void bpe_encode(const BPE *bpe, BPEScratch *s, const uint8_t *text, size_t n, int allow_special,
                TokenList *out);

// Split points for encoding one long text in independent parts. A cut p has text[p-1] == '\n'
// and text[p] a printable ASCII character other than space: the regex always ends a piece there,
// and pieces from p on do not depend on what came before. Returns the first cut p with
// from <= p < to (and p < n), or to when there is none.
size_t bpe_find_cut(const uint8_t *text, size_t n, size_t from, size_t to);
// The last cut p with from <= p < to (and p < n), or from when there is none.
size_t bpe_find_last_cut(const uint8_t *text, size_t n, size_t from, size_t to);
// Encode text[begin, end) where begin and end are cuts (or 0 and n): the regex sees the text up
// to n, so the result equals that part of bpe_encode(text, n). Used to encode in parallel.
void bpe_encode_range(const BPE *bpe, BPEScratch *s, const uint8_t *text, size_t n, size_t begin,
                      size_t end, int allow_special, TokenList *out);
// bpe_encode on nthreads threads (one scratch each, scratch[0..nthreads)); same output.
void bpe_encode_parallel(const BPE *bpe, BPEScratch **scratch, int nthreads, const uint8_t *text,
                         size_t n, int allow_special, TokenList *out);

#endif
