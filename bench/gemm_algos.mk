# bench/gemm_algos.mk: cuBLASLt algorithm choice and epilogues at GPT-2 124M's GEMM shapes.
#   make BACKEND=cuda ATTENTION=flash build/cuda-flash/bench/gemm_algos    build
#   $(BUILD)/bench/gemm_algos [-k K] [-b B] [-t T] [-r REPS] [-8]           run (one GPU; -8: FP8 too)
# It needs only the runtime (backend_init, dev_malloc, the cuBLASLt handle and workspace).
GEMM_ALGOS = $(BUILD)/bench/gemm_algos

ifeq ($(BACKEND),cuda)
GEMM_ALGOS_SRC = bench/gemm_algos.cu runtime/device.cu utils.c
$(GEMM_ALGOS): $(call obj,$(GEMM_ALGOS_SRC))
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LDLIBS)
endif
