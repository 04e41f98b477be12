# bench/grid_sync.mk: what one dependency between two phases of a decode step costs, as a
# kernel boundary (PDL, in a graph) and as a persistent kernel's grid barrier (issue 20).
#   make BACKEND=cuda build/cuda-flash/bench/grid_sync      build
#   $(BUILD)/bench/grid_sync [BLOCKS_PER_SM] [PHASES]      run (one GPU; prints SKIP without)
GRID_SYNC = $(BUILD)/bench/grid_sync

ifeq ($(BACKEND),cuda)
$(GRID_SYNC): $(call obj,bench/grid_sync.cu)
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LDLIBS)
gpu-bench: $(GRID_SYNC)
endif
