# bench/infer.mk: generation speed (included by the Makefile).
#   make BACKEND=cuda bench-infer   bench/infer.sh: bench_infer beside Hugging Face generate()
#                                   (scripts/hf_reference.py bench) in the same run, as a
#                                   markdown table in build/<variant>/bench/infer.md
# bench_infer is one of gpu-bench (make cuda-build).

.PHONY: bench-infer
gpu-bench: $(BUILD)/bench/bench_infer
$(BUILD)/bench/bench_infer: $(call obj,bench/bench_infer.c) $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LDLIBS)

bench-infer: $(BUILD)/bench/bench_infer
	BUILD=$(BUILD) bash bench/infer.sh $(BUILD)/bench/infer.md
