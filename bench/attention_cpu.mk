# bench_attention_cpu: naive vs flash attention on the CPU, every backend linked at once with
# its symbols prefixed by its name (ATTENTION_BACKENDS_OBJ in the Makefile, for the tests)
ifeq ($(BACKEND),cpu)
.PHONY: bench-attention-cpu
$(BUILD)/bench/bench_attention_cpu: $(call obj,bench/bench_attention_cpu.c utils.c) $(ATTENTION_BACKENDS_OBJ)
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LDLIBS)
bench-attention-cpu: $(BUILD)/bench/bench_attention_cpu
	$< --csv $(BUILD)/bench/attention_cpu.csv
endif
