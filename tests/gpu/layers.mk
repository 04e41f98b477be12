# tests/gpu/layers.mk: the CUDA layers (layers/*.cu) and the CUDA naive attention against the
# CPU implementations, which are compiled a second time as plain C (no BACKEND_CUDA, so floatX
# is float) with every symbol of layers.h and attention.h renamed cpu_*.
#   make BACKEND=cuda gpu-test-layers          build and run (prints SKIP without a GPU)
#   make BACKEND=cuda gpu-test-layers-build    build only
#   $(BUILD)/tests/gpu/test_layers_gpu matmul attention    run some groups
.PHONY: gpu-test-layers gpu-test-layers-build
GPU_TEST_LAYERS = $(BUILD)/tests/gpu/test_layers_gpu

ifeq ($(BACKEND),cuda)
# the operations under test, on each side (listed, not globbed: other layers/ files may need
# more of the program than this test links)
GPU_TEST_LAYER_OPS = encoder layernorm matmul gelu residual crossentropy adamw
GPU_TEST_CUDA_SRC = layers/device.cu $(patsubst %,layers/%.cu,$(GPU_TEST_LAYER_OPS)) attention/naive.cu
GPU_TEST_CPU_SRC = layers/device_cpu.c $(patsubst %,layers/%.c,$(GPU_TEST_LAYER_OPS)) attention/naive.c
CPU_REF_SYMS = backend_name backend_init backend_describe device_memory_total device_memory_free \
    backend_workspace_size encoder_backward_scratch_size layernorm_backward_scratch_size \
    matmul_backward_scratch_size dev_malloc dev_try_malloc \
    dev_free dev_memset_zero dev_upload dev_download dev_copy dev_synchronize dev_bytes_in_use \
    dev_bytes_peak floatX_upload floatX_download floatX_from_float encoder_forward \
    encoder_backward layernorm_forward layernorm_backward matmul_forward matmul_backward \
    gelu_forward gelu_backward residual_forward crossentropy_forward_backward grad_sumsq \
    dev_read_float adamw_update attention_name attention_saved_size attention_scratch_size \
    attention_forward attention_backward
CPU_REF_CFLAGS = $(filter-out -DBACKEND_CUDA,$(CFLAGS)) $(foreach s,$(CPU_REF_SYMS),-D$(s)=cpu_$(s))
CPU_REF_OBJ = $(patsubst %.c,$(BUILD)/cpuref/%.o,$(GPU_TEST_CPU_SRC))

# (the renaming list is in this file: a symbol added to it rebuilds the objects)
$(BUILD)/cpuref/%.o: %.c tests/gpu/layers.mk
	@mkdir -p $(dir $@)
	$(CC) $(CPU_REF_CFLAGS) -c $< -o $@

$(GPU_TEST_LAYERS): $(call obj,tests/gpu/test_layers_gpu.cu $(GPU_TEST_CUDA_SRC) utils.c) $(CPU_REF_OBJ)
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LDLIBS)

gpu-test-layers-build: $(GPU_TEST_LAYERS)
gpu-test-layers: $(GPU_TEST_LAYERS)
	$(GPU_TEST_LAYERS)
else
gpu-test-layers gpu-test-layers-build:
	@echo "the GPU layer tests need the CUDA build: make BACKEND=cuda $@"; exit 1
endif
