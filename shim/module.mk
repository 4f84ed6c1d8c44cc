# SPDX-License-Identifier: MIT
# The CUDA part is built when the toolkit's headers are there (CUDA_HOME,
# default /usr/local/cuda); ipcbyval never links libcuda either way.
SHIM_ZE_SRC := $(filter-out shim/cu_%.c,$(wildcard shim/*.c))
SHIM_CU_SRC := $(wildcard shim/cu_*.c)
LIB_SRC += $(SHIM_ZE_SRC)

ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)
HAVE_CUDA := 1
LIB_SRC += $(SHIM_CU_SRC)
LIB_CFLAGS += -DBYVAL_HAVE_CUDA -I$(CUDA_HOME)/include
else
HAVE_CUDA :=
$(info ipcbyval: no $(CUDA_HOME)/include/cuda.h: building the Level Zero part only)
endif
