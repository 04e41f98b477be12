# bench/timeline.mk: the CUPTI injection library that records a program's GPU timeline
# (bench/kernel_timeline.c; scripts/timeline.py reads what it writes).
#   make BACKEND=cuda $(BUILD)/bench/libkernel_timeline.so
KERNEL_TIMELINE = $(BUILD)/bench/libkernel_timeline.so
ifeq ($(BACKEND),cuda)
CUDA_ROOT ?= $(patsubst %/bin/,%,$(dir $(shell command -v $(NVCC))))
$(KERNEL_TIMELINE): bench/kernel_timeline.c
	@mkdir -p $(dir $@)
	$(CC) -shared -fPIC -O2 -Wall -Wextra -I$(CUDA_ROOT)/include $< -o $@ -L$(CUDA_ROOT)/lib \
		-L$(CUDA_ROOT)/lib64 -lcupti
endif
