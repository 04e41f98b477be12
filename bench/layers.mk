# bench/layers.mk: per-layer timings of the CUDA backend at GPT-2 124M's shapes.
#   make BACKEND=cuda ATTENTION=naive bench-layers     build and run (B = 16 and 64)
#   $(BUILD)/bench/bench_layers_gpu 64                 one batch size
.PHONY: bench-layers bench-layers-build
BENCH_LAYERS = $(BUILD)/bench/bench_layers_gpu

ifeq ($(BACKEND),cuda)
BENCH_LAYERS_SRC = bench/bench_layers_gpu.cu $(ATTENTION_CUDA_SRC) $(LAYERS_CUDA_SRC) utils.c
$(BENCH_LAYERS): $(call obj,$(BENCH_LAYERS_SRC))
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LDLIBS)

bench-layers-build: $(BENCH_LAYERS)
bench-layers: $(BENCH_LAYERS)
	$(BENCH_LAYERS)
else
bench-layers bench-layers-build:
	@echo "the layer benchmark needs the CUDA build: make BACKEND=cuda $@"; exit 1
endif
