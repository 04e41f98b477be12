# data/data.mk: the tokenizer tools and `make data` (included by the Makefile).
#   make prepare_data tokenize        the two tools, built in $(BUILD) and copied to the top level
#   make data                         TinyShakespeare token files + the tokenizer file; the inputs
#                                     come from their canonical URLs, or with DATA_SRC=<folder>
#                                     from a mirror laid out like ../shared/data (offline, CI)
#   make test-tokenizer               tests/test_tokenizer.c alone (links only the tokenizer)
#   make bench-tokenizer              encode speed on TinyShakespeare (bench/bench_tokenizer.c)
#   make test-tiktoken                the encoder against tiktoken on every script and code point
#                                     of Unicode 16 and on TinyShakespeare (tests/test_tiktoken.py)
#   make fuzz                         the libFuzzer harnesses in fuzz/ (clang); fuzz/run.sh runs them
#   make -s print-fuzz-targets        their names, for fuzz/run.sh
# The tools link only utils.c and the tokenizer, never the model, and data/tokenizer.c needs no
# library: PCRE2 is linked only where text is encoded (data/bpe.c).

DATA_SRC ?=
TOKENIZER_OBJ = $(call obj,utils.c data/tokenizer.c data/bpe.c data/json.c)
TOKENIZER_LIBS = $(PCRE2_LIBS) -lpthread

.PHONY: test-tokenizer bench-tokenizer test-tiktoken fuzz print-fuzz-targets

prepare_data: $(BUILD)/prepare_data
	cp $< $@
tokenize: $(BUILD)/tokenize
	cp $< $@

$(BUILD)/prepare_data: $(call obj,data/prepare_data.c) $(TOKENIZER_OBJ)
	$(CC) $(LDFLAGS) $^ -o $@ $(TOKENIZER_LIBS)
$(BUILD)/tokenize: $(call obj,data/tokenize.c) $(TOKENIZER_OBJ)
	$(CC) $(LDFLAGS) $^ -o $@ $(TOKENIZER_LIBS)
$(BUILD)/bench_tokenizer: $(call obj,bench/bench_tokenizer.c) $(TOKENIZER_OBJ)
	$(CC) $(LDFLAGS) $^ -o $@ $(TOKENIZER_LIBS)
$(BUILD)/tiktoken_compare: $(call obj,tests/tiktoken_compare.c) $(TOKENIZER_OBJ)
	$(CC) $(LDFLAGS) $^ -o $@ $(TOKENIZER_LIBS)
$(BUILD)/tokenizer-tests/test_tokenizer: $(call obj,tests/test_tokenizer.c) $(TOKENIZER_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(TOKENIZER_LIBS)

test-tokenizer: $(BUILD)/tokenizer-tests/test_tokenizer $(BUILD)/tokenize $(BUILD)/prepare_data
	BUILD=$(BUILD) $<

test-tiktoken: $(BUILD)/tiktoken_compare $(BUILD)/tokenize $(BUILD)/prepare_data
	BUILD=$(BUILD) bash tests/run_tests.sh tests/test_tiktoken.sh

bench-tokenizer: $(BUILD)/bench_tokenizer data/tinyshakespeare/input.txt data/gpt2/vocab.bpe data/gpt2/encoder.json
	$< data/tinyshakespeare/input.txt

# ---- make data -------------------------------------------------------------------------------
# Inputs are fetched once (scripts/get_data.sh checks their sha256); outputs are rebuilt only when
# an input is newer. The tools are order-only prerequisites: rebuilding a tool does not redo the
# data (make -B data does).
TS_DIR = data/tinyshakespeare
GPT2_DIR = data/gpt2
GPT2_VOCAB = $(GPT2_DIR)/vocab.bpe $(GPT2_DIR)/encoder.json
DATA_OUT = $(TS_DIR)/tiny_shakespeare_train.bin $(TS_DIR)/tiny_shakespeare_val.bin data/gpt2_tokenizer.bin

data: $(DATA_OUT)

$(TS_DIR)/input.txt:
	DATA_SRC="$(DATA_SRC)" scripts/get_data.sh tinyshakespeare/input.txt $@
$(GPT2_DIR)/vocab.bpe:
	DATA_SRC="$(DATA_SRC)" scripts/get_data.sh gpt2/vocab.bpe $@
$(GPT2_DIR)/encoder.json:
	DATA_SRC="$(DATA_SRC)" scripts/get_data.sh gpt2/encoder.json $@

$(TS_DIR)/tiny_shakespeare_train.bin $(TS_DIR)/tiny_shakespeare_val.bin &: $(TS_DIR)/input.txt $(GPT2_VOCAB) | $(BUILD)/prepare_data
	$(BUILD)/prepare_data --tinyshakespeare --vocab $(GPT2_DIR) $(TS_DIR)/input.txt $(TS_DIR)/tiny_shakespeare
data/gpt2_tokenizer.bin: $(GPT2_VOCAB) | $(BUILD)/tokenize
	$(BUILD)/tokenize --vocab $(GPT2_DIR) export-tokenizer $@

# ---- fuzzing (clang, libFuzzer + AddressSanitizer + UBSan) ---------------------------------------
FUZZ_CC ?= clang
FUZZ_CFLAGS = -g -O1 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter \
              -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_TARGETS = fuzz_encode fuzz_vocab fuzz_tokenizer_file fuzz_token_file fuzz_safetensors fuzz_train_state
FUZZ_DEPS = utils.c utils.h data/tokenizer.c data/tokenizer.h data/json.c data/json.h data/bpe.c data/bpe.h \
            data/safetensors.c data/safetensors.h train_state.c train_state.h fuzz/fuzz_common.h

fuzz: $(addprefix build/fuzz/,$(FUZZ_TARGETS))
print-fuzz-targets:
	@echo $(FUZZ_TARGETS)
build/fuzz/%: fuzz/%.c $(FUZZ_DEPS) | $(PCRE2_MISSING)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(PCRE2_CFLAGS) $< utils.c data/tokenizer.c data/json.c data/bpe.c data/safetensors.c train_state.c -o $@ $(PCRE2_LIBS) -lpthread -lm
