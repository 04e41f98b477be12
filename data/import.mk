# data/import.mk: import_hf, Hugging Face GPT-2 weights (model.safetensors) -> llm.c model file.
#   make import_hf        the tool, built in $(BUILD) and copied to the top level
# It links only utils.c, data/safetensors.c (the parsers of the safetensors header and
# config.json, fuzzed by fuzz/fuzz_safetensors.c), the JSON reader they share with the tokenizer
# (data/json.c) and the ByteBuf of data/tokenizer.c it reads strings into: no model, no backend,
# no PCRE2, so it builds and runs the same everywhere.
# tests/test_infer.c runs $(BUILD)/import_hf, so test-build builds it.

import_hf: $(BUILD)/import_hf
	cp $< $@

$(BUILD)/import_hf: $(call obj,data/import_hf.c data/safetensors.c data/json.c data/tokenizer.c utils.c)
	$(CC) $(LDFLAGS) $^ -o $@ -lm

test-build: $(BUILD)/import_hf
