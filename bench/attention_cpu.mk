# bench_attention_cpu: naive vs flash attention on the CPU, both backends linked at once with
# their symbols renamed (the rule for the renamed objects is in the Makefile, for the tests)
ifeq ($(BACKEND),cpu)
.PHONY: bench-attention-cpu
$(BUILD)/bench/bench_attention_cpu: $(call obj,bench/bench_attention_cpu.c utils.c) $(BUILD)/attention/naive.renamed.o $(BUILD)/attention/flash.renamed.o
	$(LINK) $^ -o $@ $(LDLIBS)
bench-attention-cpu: $(BUILD)/bench/bench_attention_cpu
	$< --csv $(BUILD)/bench/attention_cpu.csv
endif
