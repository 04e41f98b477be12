# tests/gpu/infer.mk: generation on the GPU (included by the Makefile).
#   make BACKEND=cuda test-infer-gpu   the decode kernel, the cache, cached against recomputed
#                                      logits (tests/gpu/test_infer_gpu.c), then parity with
#                                      Hugging Face transformers (tests/gpu/hf_parity.sh: needs
#                                      python3 with torch and transformers; skipped without)
# Both skip cleanly where there is no GPU. test_infer_gpu is one of gpu-tests (make cuda-build,
# scripts/gpu_check.sh runs every program in build/cuda-*/tests/gpu/).

# the CPU attention_decode (as plain C, floatX = float) beside the double-precision reference:
# the CPU reference object of the Makefile (CPU_REF_OBJ), declared by tests/gpu/cpu_reference.h
$(call obj,tests/gpu/test_infer_gpu.c): CFLAGS += -I$(dir $(CPU_REF_NAMES))
$(call obj,tests/gpu/test_infer_gpu.c): $(CPU_REF_NAMES)

.PHONY: test-infer-gpu
gpu-tests: $(BUILD)/tests/gpu/test_infer_gpu
$(BUILD)/tests/gpu/test_infer_gpu: $(call obj,tests/gpu/test_infer_gpu.c) $(CPU_REF_OBJ) $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LDLIBS)

test-infer-gpu: $(BUILD)/tests/gpu/test_infer_gpu $(BUILD)/infer_gpt2 $(BUILD)/import_hf
	$(BUILD)/tests/gpu/test_infer_gpu
	BUILD=$(BUILD) bash tests/gpu/hf_parity.sh
