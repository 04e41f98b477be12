# data/import.mk: import_hf, Hugging Face GPT-2 weights (model.safetensors) -> llm.c model file.
#   make import_hf        the tool, built in $(BUILD) and copied to the top level
# It links only utils.c and data/safetensors.c (the parsers of the safetensors header and
# config.json, fuzzed by fuzz/fuzz_safetensors.c): no model, no backend, so it builds and runs
# the same everywhere.
# tests/test_infer.c runs $(BUILD)/import_hf, so test-build builds it.

import_hf: $(BUILD)/import_hf
	cp $< $@

$(BUILD)/import_hf: $(call obj,data/import_hf.c data/safetensors.c utils.c)
	$(CC) $(LDFLAGS) $^ -o $@ -lm

test-build: $(BUILD)/import_hf
