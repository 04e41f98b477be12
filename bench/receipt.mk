# bench/receipt.mk: the counting functions of `make compare`'s receipt (included by the Makefile).
# bench/attention_counts.c (FLOPs and pencil-count DRAM bytes of one attention pass, per
# backend) is plain C: the CPU test that checks it against the FlashAttention paper's closed
# forms links it in every build, bench/attention (bench/attention.mk) links it in CUDA builds.
# The GPU side is scripts/receipt.sh (run by scripts/compare.sh where there is a GPU); its
# CPU test, `make test-receipt` (in `make check`), runs it with stand-ins for ncu and the GPU.
$(BUILD)/tests/test_attention_counts: $(call obj,tests/test_attention_counts.c bench/attention_counts.c)
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LDLIBS)
# the receipt's script without a GPU: its ncu CSV parsing and its output, with stand-ins
.PHONY: test-receipt
test-receipt:
	bash tests/run_tests.sh tests/test_receipt.sh
