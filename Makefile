# Build matrix: BACKEND=cpu|cuda (default: cuda when a GPU is visible), ATTENTION=naive|flash.
#   make                      train_gpt2 and infer_gpt2 for the default backend and attention
#   make ATTENTION=naive      the same with the three-kernel attention baseline
#   make BACKEND=cuda         force the CUDA build (e.g. to compile on a machine without a GPU)
#   make import_hf            the Hugging Face weights importer (model.safetensors -> model file)
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
# the attention backends: every attention/<name>.c (each with its attention/<name>.cu)
ATTENTION_BACKENDS = $(basename $(notdir $(wildcard attention/*.c)))
ifeq ($(filter $(ATTENTION),$(ATTENTION_BACKENDS)),)
$(error ATTENTION must be one of $(ATTENTION_BACKENDS), not '$(ATTENTION)')
endif

# make predefines CC (as cc), so `CC ?= gcc` would never apply: gcc unless the user sets CC
ifeq ($(origin CC),default)
CC = gcc
endif
NVCC ?= nvcc
# OPT: optimisation of host C code (OPT=-O3 for binaries that run on another x86-64 machine);
# EXTRA_CFLAGS, EXTRA_LDFLAGS: added to every C compile, to every link
OPT ?= -O3 -march=native
# PCRE2, the GPT-2 pre-tokenizer's regex engine (data/bpe.c): 10.46 with Unicode 16 tables, as
# tiktoken has, built static by scripts/build_pcre2.sh (scripts/setup.sh runs it) into
# PCRE2_PREFIX. Another PCRE2: PCRE2_CFLAGS=-I<dir> PCRE2_LIBS=<lib>; the tokenizer tests then
# check that its Unicode version is tiktoken's (BPE_UNICODE_VERSION in data/bpe.h).
PCRE2_PREFIX ?= deps/pcre2
PCRE2_CFLAGS ?= -I$(PCRE2_PREFIX)/include
PCRE2_LIBS ?= $(PCRE2_PREFIX)/lib/libpcre2-8.a
CFLAGS = $(OPT) -std=c11 -ffp-contract=fast -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -fopenmp -MMD -MP $(PCRE2_CFLAGS) $(EXTRA_CFLAGS)
LDFLAGS = $(EXTRA_LDFLAGS)
LDLIBS = -lm -lgomp
# NVCC_ARCH: the target of device code; attention/flash_sm90.cu, layers/decode_gemm_sm90.cu and
# layers/decode_layers_sm90.cu always get sm_90a (their rule below)
NVCC_ARCH = -arch=$(CUDA_ARCH)
NVCCFLAGS = -O3 $(NVCC_ARCH) --use_fast_math -std=c++17 -DBACKEND_CUDA -MMD -MP \
            -Xcompiler -Wall,-Wno-unused-parameter $(EXTRA_NVCCFLAGS)

VARIANT = $(BACKEND)-$(ATTENTION)
ifeq ($(SANITIZE),1)
OPT = -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
VARIANT := $(VARIANT)-san
endif
BUILD = build/$(VARIANT)

# ---- sources --------------------------------------------------------------------------
CORE_SRC = gpt2.c checkpoint.c gpt2_decode.c sampler.c utils.c data/dataloader.c data/tokenizer.c
BPE_SRC = data/bpe.c data/json.c
# the layers of each backend with the runtime they run on (runtime/: device memory and copies,
# the stream, graphs, communication); the GPU tests and benchmarks link these too
LAYERS_CPU_SRC = $(wildcard runtime/*.c layers/*.c)
LAYERS_CUDA_SRC = $(wildcard runtime/*.cu layers/*.cu)
ifeq ($(BACKEND),cuda)
CFLAGS += -DBACKEND_CUDA
# flash: the mma.sync kernels (flash.cu, for CUDA_ARCH) and the Hopper forward (flash_sm90.cu,
# for sm_90a), one fat binary: flash.cu picks at run time from the device's compute capability
ATTENTION_CUDA_SRC = attention/$(ATTENTION).cu $(if $(filter flash,$(ATTENTION)),attention/flash_sm90.cu)
BACKEND_SRC = $(LAYERS_CUDA_SRC) $(ATTENTION_CUDA_SRC)
LINK = $(NVCC) -arch=$(CUDA_ARCH) $(LDFLAGS)
LDLIBS = -lm -lgomp -lcublas -lcublasLt -lnccl
else
BACKEND_SRC = $(LAYERS_CPU_SRC) attention/$(ATTENTION).c
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

# import_hf: Hugging Face GPT-2 weights (model.safetensors) -> llm.c model file. It links the
# model file's layout (checkpoint.c), utils.c and the parsers of data/ (safetensors.c, fuzzed
# by fuzz/fuzz_safetensors.c; the JSON reader; the ByteBuf of tokenizer.c it reads strings
# into): no model, no backend, no PCRE2, so it builds and runs the same everywhere.
# tests/test_infer.c runs $(BUILD)/import_hf, so test-build builds it.
import_hf: $(BUILD)/import_hf
	cp $< $@
$(BUILD)/import_hf: $(call obj,import_hf.c checkpoint.c data/safetensors.c data/json.c data/tokenizer.c utils.c)
	$(CC) $(LDFLAGS) $^ -o $@ -lm

$(BUILD)/%.c.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# The default PCRE2 must have been built: say so before a compiler says "pcre2.h: no such file".
# (Checked for the one file that includes pcre2.h; PCRE2_LIBS given elsewhere skips the check.)
PCRE2_MISSING = $(if $(filter file,$(origin PCRE2_LIBS)),$(if $(wildcard $(PCRE2_LIBS)),,pcre2-missing))
$(BUILD)/data/bpe.c.o: | $(PCRE2_MISSING)
.PHONY: pcre2-missing
pcre2-missing:
	@echo "Makefile: $(PCRE2_LIBS) is missing: run scripts/setup.sh (or scripts/build_pcre2.sh) to" \
	      "build PCRE2 with Unicode 16 tables there, or set PCRE2_CFLAGS and PCRE2_LIBS to another PCRE2" >&2
	@exit 1
$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
# objects made on the way by pattern rules (test objects, the prefixed ones below) are kept, so
# that a second `make test` compiles nothing
.SECONDARY:

# ---- two implementations of one interface in one program ------------------------------------
# The tests and benchmarks that compare two implementations of the same functions (the
# attention backends with each other, the CUDA layers with the CPU ones) link both: one side's
# objects are joined into one (ld -r) and every global symbol they define gets a prefix
# (objcopy --redefine-syms, the list from nm), so no list of names is kept by hand.
#   $(call prefix_symbols,PREFIX)   recipe: the objects among $^ into $@, symbols PREFIX_*;
#                                   $@.syms keeps the pairs "name PREFIX_name"
define prefix_symbols
	@mkdir -p $(dir $@)
	$(LD) -r $(filter %.o,$^) -o $@.joined
	nm -g --defined-only -P $@.joined | awk '{ print $$1, "$(1)_" $$1 }' > $@.syms
	objcopy --redefine-syms=$@.syms $@.joined $@
	rm $@.joined
endef
# Each attention backend on its own: $(BUILD)/prefixed/attention/naive.c.o has
# naive_attention_forward, ... (attention/both_backends.h declares them); .cu.o in CUDA builds.
$(BUILD)/prefixed/attention/%.o: $(BUILD)/attention/%.o
	$(call prefix_symbols,$(basename $*))
BACKEND_EXT = $(if $(filter cuda,$(BACKEND)),cu,c)
ATTENTION_BACKENDS_OBJ = $(patsubst %,$(BUILD)/prefixed/attention/%.$(BACKEND_EXT).o,$(ATTENTION_BACKENDS))
# The CUDA tests' reference: every CPU layer, the CPU runtime (so that calls into it are renamed
# with the layers) and the CPU naive attention, compiled as plain C (floatX = float) and joined
# into one object with every symbol prefixed cpu_ (cpu_encoder_forward, ...). The same names,
# as #defines in the generated cpu_reference_names.h, let tests/gpu/cpu_reference.h declare
# them from layers.h and attention.h themselves.
CPU_REF_SRC = $(LAYERS_CPU_SRC) attention/naive.c
CPU_REF_OBJ = $(BUILD)/cpuref/cpu_reference.o
CPU_REF_NAMES = $(BUILD)/cpuref/cpu_reference_names.h
$(BUILD)/cpuref/%.c.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -DBACKEND_CUDA,$(CFLAGS)) -c $< -o $@
$(CPU_REF_OBJ): $(patsubst %,$(BUILD)/cpuref/%.o,$(CPU_REF_SRC))
	$(call prefix_symbols,cpu)
$(CPU_REF_NAMES): $(CPU_REF_OBJ)
	awk 'BEGIN { print "// generated by the Makefile from $<.syms, for tests/gpu/cpu_reference.h" } \
	     $$1 ~ /^[A-Za-z_][A-Za-z0-9_]*$$/ { def = def "#define " $$1 " " $$2 "\n"; \
	                                         undef = undef "#undef " $$1 "\n" } \
	     END { printf "#ifndef CPU_REFERENCE_UNDEF\n%s#else\n%s#endif\n", def, undef }' $<.syms > $@
# wgmma and setmaxnreg exist only for sm_90a (the -arch=sm_90a shorthand fails with nvcc 13.0);
# clusters from sm_90, which a CUDA_ARCH of sm_80 would not give
$(BUILD)/attention/flash_sm90.cu.o $(BUILD)/layers/decode_gemm_sm90.cu.o $(BUILD)/layers/decode_layers_sm90.cu.o: NVCC_ARCH = -gencode=arch=compute_90a,code=sm_90a
# the flash backend is both files: its prefixed object (the tests' and benchmarks' copy) joins them
$(BUILD)/prefixed/attention/flash.cu.o: $(BUILD)/attention/flash_sm90.cu.o

-include data/data.mk
# GPU tests and benchmarks (tests/gpu/*.mk, bench/*.mk) add their own rules
-include $(wildcard tests/gpu/*.mk bench/*.mk)

# ---- tests --------------------------------------------------------------------------------
# Each tests/test_*.c is one program (see tests/test.h). test_attention links every attention
# backend at once, each with its symbols prefixed by its name (prefix_symbols above).
TESTS = $(basename $(notdir $(wildcard tests/test_*.c)))
TEST_BINS = $(addprefix $(BUILD)/tests/,$(TESTS))

$(BUILD)/tests/test_attention: $(call obj,tests/test_attention.c) $(ATTENTION_BACKENDS_OBJ) $(CORE_OBJ)
	$(LINK) $^ -o $@ $(LDLIBS)
$(BUILD)/tests/test_tokenizer: $(call obj,tests/test_tokenizer.c $(BPE_SRC)) $(CORE_OBJ)
	$(LINK) $^ -o $@ $(LDLIBS) $(PCRE2_LIBS)
$(BUILD)/tests/test_json: $(call obj,tests/test_json.c data/json.c) $(CORE_OBJ)
	$(LINK) $^ -o $@ $(LDLIBS)
$(BUILD)/tests/%: $(call obj,tests/%.c) $(CORE_OBJ)
	$(LINK) $^ -o $@ $(LDLIBS)

# `make test` is the CPU suite whatever BACKEND says (CUDA tests live in tests/gpu/)
test:
	@$(MAKE) --no-print-directory BACKEND=cpu run-tests
test-build: $(TEST_BINS) $(BUILD)/train_gpt2 $(BUILD)/infer_gpt2 $(BUILD)/import_hf $(BUILD)/tokenize $(BUILD)/prepare_data
run-tests: test-build
	BUILD=$(BUILD) bash tests/run_tests.sh $(TEST_BINS)
# everything CI runs: both attention backends, sanitizers, CUDA compile, a short fuzz
check:
	bash scripts/check.sh
# compile and link every CUDA program, GPU tests and benchmarks included (no GPU needed)
cuda-build: $(BUILD)/train_gpt2 $(BUILD)/infer_gpt2 $(BUILD)/parity_dump gpu-tests gpu-bench $(KERNEL_TIMELINE)
gpu-tests: $(BUILD)/tests/gpu/test_layers_gpu
gpu-bench: $(BUILD)/bench/bench_layers_gpu $(BUILD)/bench/gemm_algos

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
#                [SWEEP=T,T,...|none] [SWEEP_TOKENS=N] [SWEEP_STEPS=N]
# trains with each attention backend, runs the attention microbenchmark; CSVs, table.md and PNGs
# in OUT (default compare/<UTC date-time>/). Only values given on the command line are passed on.
compare_arg = $(if $(filter command line,$(origin $(1))),$(2) $($(1)))
COMPARE_FLAGS = $(call compare_arg,BACKEND,--backend) $(call compare_arg,STEPS,--steps) \
    $(call compare_arg,B,-b) $(call compare_arg,T,-t) $(call compare_arg,MODEL,--model) \
    $(call compare_arg,OUT,--out) $(call compare_arg,SWEEP,--sweep) \
    $(call compare_arg,SWEEP_TOKENS,--sweep-tokens) $(call compare_arg,SWEEP_STEPS,--sweep-steps) \
    $(if $(filter 1,$(TINY)),--tiny)
.PHONY: test-compare
compare:
	bash scripts/compare.sh $(COMPARE_FLAGS)
# the comparison's CI test: tiny mode on the CPU, checks the CSVs, the table and the PNGs
test-compare:
	bash tests/run_tests.sh tests/test_compare.sh

clean:
	rm -rf build train_gpt2 infer_gpt2 prepare_data tokenize import_hf

-include $(shell find build -name '*.d' 2>/dev/null)
