# Build matrix: BACKEND=cpu|cuda (default: cuda when a GPU is visible), ATTENTION=naive|flash.
#   make                      train_gpt2 and infer_gpt2 for the default backend and attention
#   make ATTENTION=naive      the same with the three-kernel attention baseline
#   make BACKEND=cuda         force the CUDA build (e.g. to compile on a machine without a GPU)
#   make test                 the CPU test suite (what CI runs)
#   make data                 TinyShakespeare token files and the tokenizer file
#   make train                prepare data, build, train, sample
# Objects and binaries of each variant live in build/<backend>-<attention>[-san]/; the
# top-level ./train_gpt2 and ./infer_gpt2 are copies of the variant built last.

BACKEND ?= $(shell nvidia-smi -L 2>/dev/null | grep -q GPU && echo cuda || echo cpu)
ATTENTION ?= flash
SANITIZE ?= 0
CUDA_ARCH ?= sm_90

ifeq ($(filter $(BACKEND),cpu cuda),)
$(error BACKEND must be cpu or cuda, not '$(BACKEND)')
endif
ifeq ($(filter $(ATTENTION),naive flash),)
$(error ATTENTION must be naive or flash, not '$(ATTENTION)')
endif

CC ?= gcc
NVCC ?= nvcc
# OPT: optimisation of host C code (OPT=-O3 for binaries that run on another x86-64 machine);
# EXTRA_CFLAGS, EXTRA_LDFLAGS: e.g. where PCRE2's header and library are not installed
OPT ?= -O3 -march=native
CFLAGS = $(OPT) -std=c11 -ffp-contract=fast -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -fopenmp -MMD -MP $(EXTRA_CFLAGS)
LDFLAGS = $(EXTRA_LDFLAGS)
LDLIBS = -lm -lgomp
NVCCFLAGS = -O3 -arch=$(CUDA_ARCH) --use_fast_math -std=c++17 -DBACKEND_CUDA -MMD -MP \
            -Xcompiler -Wall,-Wno-unused-parameter $(EXTRA_NVCCFLAGS)
PCRE2_LIBS ?= -lpcre2-8

VARIANT = $(BACKEND)-$(ATTENTION)
ifeq ($(SANITIZE),1)
OPT = -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
VARIANT := $(VARIANT)-san
endif
BUILD = build/$(VARIANT)

# ---- sources --------------------------------------------------------------------------
CORE_SRC = gpt2.c gpt2_decode.c sampler.c utils.c data/dataloader.c data/tokenizer.c
BPE_SRC = data/bpe.c
ifeq ($(BACKEND),cuda)
CFLAGS += -DBACKEND_CUDA
BACKEND_SRC = $(wildcard layers/*.cu) attention/$(ATTENTION).cu
LINK = $(NVCC) -arch=$(CUDA_ARCH) $(LDFLAGS)
LDLIBS = -lm -lgomp -lcublas -lcublasLt -lnccl
else
BACKEND_SRC = $(wildcard layers/*.c) attention/$(ATTENTION).c
LINK = $(CC) $(LDFLAGS) -fopenmp
endif

obj = $(patsubst %,$(BUILD)/%.o,$(1))
CORE_OBJ = $(call obj,$(CORE_SRC) $(BACKEND_SRC))

# ---- programs ---------------------------------------------------------------------------
.PHONY: all test run-tests test-build check cuda-build data train compare clean
all: train_gpt2 infer_gpt2

train_gpt2: $(BUILD)/train_gpt2
	cp $< $@
infer_gpt2: $(BUILD)/infer_gpt2
	cp $< $@

$(BUILD)/train_gpt2: $(call obj,train_gpt2.c train_state.c) $(CORE_OBJ)
	$(LINK) $^ -o $@ $(LDLIBS)
$(BUILD)/infer_gpt2: $(call obj,infer_gpt2.c $(BPE_SRC)) $(CORE_OBJ)
	$(LINK) $^ -o $@ $(LDLIBS) $(PCRE2_LIBS)

$(BUILD)/%.c.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

-include data/data.mk data/import.mk
# GPU tests and benchmarks (tests/gpu/*.mk, bench/*.mk) add their own rules
-include $(wildcard tests/gpu/*.mk bench/*.mk)

# ---- tests --------------------------------------------------------------------------------
# Each tests/test_*.c is one program (see tests/test.h). test_attention links both attention
# backends at once: each is compiled a second time with its symbols renamed by prefix.
TESTS = $(basename $(notdir $(wildcard tests/test_*.c)))
TEST_BINS = $(addprefix $(BUILD)/tests/,$(TESTS))
ATTN_SYMS = attention_name attention_saved_size attention_scratch_size attention_forward attention_backward
rename = $(foreach s,$(ATTN_SYMS),-D$(s)=$(1)_$(s))
$(BUILD)/attention/%.renamed.o: attention/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(call rename,$*) -c $< -o $@

$(BUILD)/tests/test_attention: $(call obj,tests/test_attention.c) $(BUILD)/attention/naive.renamed.o $(BUILD)/attention/flash.renamed.o $(CORE_OBJ)
	$(LINK) $^ -o $@ $(LDLIBS)
$(BUILD)/tests/test_tokenizer: $(call obj,tests/test_tokenizer.c $(BPE_SRC)) $(CORE_OBJ)
	$(LINK) $^ -o $@ $(LDLIBS) $(PCRE2_LIBS)
$(BUILD)/tests/%: $(call obj,tests/%.c) $(CORE_OBJ)
	$(LINK) $^ -o $@ $(LDLIBS)

# `make test` is the CPU suite whatever BACKEND says (CUDA tests live in tests/gpu/)
test:
	@$(MAKE) --no-print-directory BACKEND=cpu run-tests
test-build: $(TEST_BINS) $(BUILD)/train_gpt2 $(BUILD)/infer_gpt2 $(BUILD)/tokenize $(BUILD)/prepare_data
run-tests: test-build
	BUILD=$(BUILD) bash tests/run_tests.sh $(TEST_BINS)
# everything CI runs: both attention backends, sanitizers, CUDA compile, a short fuzz
check:
	bash scripts/check.sh
# compile and link every CUDA program, GPU tests and benchmarks included (no GPU needed)
cuda-build: $(BUILD)/train_gpt2 $(BUILD)/infer_gpt2 $(BUILD)/parity_dump gpu-tests gpu-bench
gpu-tests: $(BUILD)/tests/gpu/test_layers_gpu
gpu-bench: $(BUILD)/bench/bench_layers_gpu

# ---- the main job: data, build, train, sample ----------------------------------------------
# GPU: GPT-2 124M (d12) on TinyShakespeare. CPU: a small d4 model, so that it ends in minutes.
# Each `make train` replaces the previous run in TRAIN_OUT (--overwrite).
TRAIN_OUT ?= out/train
ifeq ($(BACKEND),cuda)
TRAIN_ARGS ?= -e d12 -b 16 -t 1024 -x 300 -l 6e-4 -u 30 -q 0.1 -v 50 -m 8 -s 100 -g 128 -n 100
else
TRAIN_ARGS ?= -e d4 -b 8 -t 128 -x 150 -l 1e-3 -u 15 -q 0.1 -v 50 -m 4 -s 75 -g 64 -n 75
endif
PROMPT ?= ROMEO:
train: data all
	./train_gpt2 $(TRAIN_ARGS) -o $(TRAIN_OUT) --overwrite
	./infer_gpt2 -c $$(ls $(TRAIN_OUT)/model_*.bin | tail -n 1) -p "$(PROMPT)" -n 128 --seed 1

# ---- comparison of the attention backends (scripts/compare.sh) -----------------------------
#   make compare [STEPS=N] [B=N] [T=N] [MODEL=dN] [OUT=DIR] [TINY=1] [BACKEND=cpu|cuda]
# trains with each attention backend, runs the attention microbenchmark; CSVs, table.md and PNGs
# in OUT (default compare/<UTC date-time>/). Only values given on the command line are passed on.
compare_arg = $(if $(filter command line,$(origin $(1))),$(2) $($(1)))
COMPARE_FLAGS = $(call compare_arg,BACKEND,--backend) $(call compare_arg,STEPS,--steps) \
    $(call compare_arg,B,-b) $(call compare_arg,T,-t) $(call compare_arg,MODEL,--model) \
    $(call compare_arg,OUT,--out) $(if $(filter 1,$(TINY)),--tiny)
.PHONY: test-compare
compare:
	bash scripts/compare.sh $(COMPARE_FLAGS)
# the comparison's CI test: tiny mode on the CPU, checks the CSVs, the table and the PNGs
test-compare:
	bash tests/run_tests.sh tests/test_compare.sh

clean:
	rm -rf build train_gpt2 infer_gpt2 prepare_data tokenize import_hf

-include $(shell find build -name '*.d' 2>/dev/null)
