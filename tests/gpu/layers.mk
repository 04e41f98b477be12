# tests/gpu/layers.mk: the CUDA layers (layers/*.cu, on runtime/*.cu) and the CUDA naive
# attention against the CPU implementations, linked into the same program with their symbols
# prefixed cpu_ (CPU_REF_OBJ in the Makefile, declared by tests/gpu/cpu_reference.h).
#   make BACKEND=cuda gpu-test-layers          build and run (prints SKIP without a GPU)
#   make BACKEND=cuda gpu-test-layers-build    build only
#   $(BUILD)/tests/gpu/test_layers_gpu matmul attention    run some groups
.PHONY: gpu-test-layers gpu-test-layers-build
GPU_TEST_LAYERS = $(BUILD)/tests/gpu/test_layers_gpu

ifeq ($(BACKEND),cuda)
$(call obj,tests/gpu/test_layers_gpu.cu): NVCCFLAGS += -I$(dir $(CPU_REF_NAMES))
$(call obj,tests/gpu/test_layers_gpu.cu): $(CPU_REF_NAMES)
$(GPU_TEST_LAYERS): $(call obj,tests/gpu/test_layers_gpu.cu $(LAYERS_CUDA_SRC) attention/naive.cu utils.c) $(CPU_REF_OBJ)
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LDLIBS)

gpu-test-layers-build: $(GPU_TEST_LAYERS)
gpu-test-layers: $(GPU_TEST_LAYERS)
	$(GPU_TEST_LAYERS)
else
gpu-test-layers gpu-test-layers-build:
	@echo "the GPU layer tests need the CUDA build: make BACKEND=cuda $@"; exit 1
endif
