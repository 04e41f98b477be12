# tests/gpu/infer.mk: generation on the GPU (included by the Makefile).
#   make BACKEND=cuda test-infer-gpu   the decode kernel, the cache, cached against recomputed
#                                      logits (tests/gpu/test_infer_gpu.c), then parity with
#                                      Hugging Face transformers (tests/gpu/hf_parity.sh: needs
#                                      python3 with torch and transformers; skipped without)
# Both skip cleanly where there is no GPU. test_infer_gpu is one of gpu-tests (make cuda-build,
# scripts/gpu_check.sh runs every program in build/cuda-*/tests/gpu/).

# the CPU attention_decode, compiled a second time as plain C (floatX = float) with its symbols
# renamed cpu_*: the GPU kernel's reference beside the double-precision one
INFER_CPU_REF_SYMS = attention_decode attention_decode_dev attention_decode_scratch_size kv_cache_store
INFER_CPU_REF_OBJ = $(BUILD)/cpuref-infer/layers/decode_attention.o
$(INFER_CPU_REF_OBJ): layers/decode_attention.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -DBACKEND_CUDA,$(CFLAGS)) $(foreach s,$(INFER_CPU_REF_SYMS),-D$(s)=cpu_$(s)) -c $< -o $@

.PHONY: test-infer-gpu
gpu-tests: $(BUILD)/tests/gpu/test_infer_gpu
$(BUILD)/tests/gpu/test_infer_gpu: $(call obj,tests/gpu/test_infer_gpu.c) $(INFER_CPU_REF_OBJ) $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LDLIBS)

test-infer-gpu: $(BUILD)/tests/gpu/test_infer_gpu $(BUILD)/infer_gpt2 $(BUILD)/import_hf
	$(BUILD)/tests/gpu/test_infer_gpu
	BUILD=$(BUILD) bash tests/gpu/hf_parity.sh
