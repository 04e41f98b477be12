# GPU test of the attention backends (included by the Makefile; CUDA builds only).
#   make BACKEND=cuda gpu-tests      (or the binary: build/cuda-flash/tests/gpu/test_attention_gpu)
#   build/cuda-flash/tests/gpu/test_attention_gpu [--quick | --sanitize | --max-t N]
# Every CUDA backend is linked into one program, its symbols prefixed by its name
# (naive_attention_forward, flash_attention_forward, ...: prefix_symbols in the Makefile), as
# the CPU test does with attention/*.c.
#
# FLASH_FLAGS adds compile flags to attention/flash.cu and flash_sm90.cu, e.g. to compare tile
# shapes or the Hopper forward's ping-pong (-DFLASH_SM90_PINGPONG=0) in a separate build folder:
#   make BACKEND=cuda BUILD=build/flash-r16 FLASH_FLAGS=-DFLASH_FWD_WARP_ROWS=16 build/flash-r16/bench/attention
ifeq ($(BACKEND),cuda)

FLASH_FLAGS ?=
$(BUILD)/attention/flash.cu.o: NVCCFLAGS += $(FLASH_FLAGS)
$(BUILD)/attention/flash_sm90.cu.o: NVCCFLAGS += $(FLASH_FLAGS)

# what a GPU test or benchmark links besides its own object: the prefixed attention backends,
# the CUDA layers and runtime (device set-up: cuda_stream, backend_init, error reporting) and utils
ATTENTION_GPU_OBJ = $(ATTENTION_BACKENDS_OBJ) $(call obj,utils.c $(LAYERS_CUDA_SRC))

.PHONY: gpu-tests
gpu-tests: $(BUILD)/tests/gpu/test_attention_gpu

$(BUILD)/tests/gpu/test_attention_gpu.cu.o: NVCCFLAGS += -Xcompiler -fopenmp
$(BUILD)/tests/gpu/test_attention_gpu: $(call obj,tests/gpu/test_attention_gpu.cu) $(ATTENTION_GPU_OBJ)
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LDLIBS)

endif
