# tests/gpu/train.mk: training on the GPU (included by the Makefile).
#   $(BUILD)/tests/gpu/test_train_gpu   training steps with each micro-batch replayed as a CUDA
#                                       graph against the same steps kernel by kernel: the same
#                                       bits (tests/gpu/test_train_gpu.c); SKIP without a GPU
# It is one of gpu-tests (make cuda-build; scripts/gpu_check.sh runs every program in
# build/cuda-*/tests/gpu/).
gpu-tests: $(BUILD)/tests/gpu/test_train_gpu
$(BUILD)/tests/gpu/test_train_gpu: $(call obj,tests/gpu/test_train_gpu.c) $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LDLIBS)
