# bench/cross_sum.mk: what summing partial tiles across CTAs costs (red, red.v4, bulk reduce-adds,
# an ordered sum by the last CTA), for a fused FC + FC projection at a decode step's part (issue 20).
#   make BACKEND=cuda build/cuda-flash/bench/cross_sum                  build (sm_90)
#   $(BUILD)/bench/cross_sum [PARTS] [P] [Q] [R] [W] [PHASES]          run (one GPU; prints SKIP without)
CROSS_SUM = $(BUILD)/bench/cross_sum

ifeq ($(BACKEND),cuda)
# red.global.add.v4.f32 and the bulk reductions exist from sm_90 on: built for it whatever
# CUDA_ARCH says (on an older GPU the program says SKIP before it launches anything)
$(call obj,bench/cross_sum.cu): NVCC_ARCH = -gencode=arch=compute_90,code=[sm_90,compute_90]
$(CROSS_SUM): $(call obj,bench/cross_sum.cu)
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LDLIBS)
gpu-bench: $(CROSS_SUM)
endif
