# bench/wgmma_rate.mk: the tensor cores' rate for each wgmma form of the flash backward, alone and
# with 2-3 warpgroups at once (issue 18).
#   make BACKEND=cuda build/cuda-flash/bench/wgmma_rate      build
#   $(BUILD)/bench/wgmma_rate [ITERS]                       run (sm_90; prints SKIP otherwise)
WGMMA_RATE = $(BUILD)/bench/wgmma_rate

ifeq ($(BACKEND),cuda)
$(call obj,bench/wgmma_rate.cu): NVCC_ARCH = -gencode=arch=compute_90a,code=sm_90a
$(WGMMA_RATE): $(call obj,bench/wgmma_rate.cu)
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LDLIBS)
gpu-bench: $(WGMMA_RATE)
endif
