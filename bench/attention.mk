# Attention microbenchmark (included by the Makefile; CUDA builds only).
#   make BACKEND=cuda gpu-bench      (or the binary: build/cuda-flash/bench/attention)
#   build/cuda-flash/bench/attention --csv out/attention.csv
# Links the same objects as the GPU attention test (ATTENTION_GPU_OBJ, from
# tests/gpu/attention.mk, included before this file).
ifeq ($(BACKEND),cuda)

.PHONY: gpu-bench
gpu-bench: $(BUILD)/bench/attention

$(BUILD)/bench/attention: $(call obj,bench/attention.cu bench/attention_counts.c) $(ATTENTION_GPU_OBJ)
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LDLIBS)

endif
