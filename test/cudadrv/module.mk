# SPDX-License-Identifier: MIT
# cudadrv: a CPU test double of the CUDA driver (libcuda.so.1) and cu_pair,
# the two-process IPC exerciser. Built only where the CUDA headers exist;
# nothing links the real libcuda.
ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)

CUDADRV_DIR    := $(BUILD)/test/cudadrv
CUDADRV_LIB    := $(CUDADRV_DIR)/libcuda.so.1
CUDADRV_SRC    := $(wildcard test/cudadrv/drv_*.c)
# The device-memory ledger (test/devmem/module.mk builds its object).
CUDADRV_OBJ    := $(patsubst %.c,$(BUILD)/%.o,$(CUDADRV_SRC)) $(DEVMEM_OBJ)
CUDADRV_CFLAGS := $(ALL_CFLAGS) -I$(CUDA_HOME)/include
CU_PAIR        := $(CUDADRV_DIR)/cu_pair
CUDADRV_CHECK  := $(CUDADRV_DIR)/cudadrv_check

$(CUDADRV_DIR)/%.o: test/cudadrv/%.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)$(CC) $(CUDADRV_CFLAGS) -MMD -MP -c -o $@ $<

$(CUDADRV_LIB): $(CUDADRV_OBJ) test/cudadrv/libcuda.map
	$(call say,LD,$@)$(CC) -shared -Wl,-soname,libcuda.so.1 -Wl,--version-script=test/cudadrv/libcuda.map \
	    -Wl,-z,defs $(SANFLAGS) -o $@ $(CUDADRV_OBJ) -lpthread
	ln -sf libcuda.so.1 $(CUDADRV_DIR)/libcuda.so

CU_PAIR_SRC    := test/cudadrv/cu_pair.c test/cudadrv/cu_pair_drv.c
CU_PAIR_OBJ    := $(patsubst %.c,$(BUILD)/%.o,$(CU_PAIR_SRC))

$(CU_PAIR): $(CU_PAIR_OBJ)
	$(call say,LD,$@)$(CC) $(SANFLAGS) -o $@ $(CU_PAIR_OBJ) -ldl

# VMM manifests at their limits (1024 chunks, a forged short manifest).
CU_CHUNKS      := $(CUDADRV_DIR)/cu_chunks
$(CU_CHUNKS): test/cudadrv/cu_chunks.c $(BUILD)/test/cudadrv/cu_pair_drv.o $(BUILD)/handles/wire.o \
              $(BUILD)/handles/self.o $(BUILD)/handles/fdcheck.o $(BUILD)/handles/bgthread.o \
              $(BUILD)/cache/locks.o
	$(CC) $(CUDADRV_CFLAGS) -MMD -MP -o $@ $< $(filter %.o,$^) -ldl

# Self-check of the double; links it (rpath $ORIGIN), not the real driver.
CUDADRV_CHECK_SRC := $(wildcard test/cudadrv/cudadrv_check*.c)
$(CUDADRV_CHECK): $(CUDADRV_CHECK_SRC) test/cudadrv/cudadrv_check.h $(CUDADRV_LIB)
	$(call say,LD,$@)$(CC) $(CUDADRV_CFLAGS) -o $@ $(CUDADRV_CHECK_SRC) -L$(CUDADRV_DIR) -Wl,-rpath,'$$ORIGIN' -lcuda -ldl -lpthread

CU_LIFE        := $(CUDADRV_DIR)/cu_life
$(CU_LIFE): test/cudadrv/cu_life.c $(CUDADRV_LIB)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -I$(CUDA_HOME)/include -o $@ $< -L$(CUDADRV_DIR) -Wl,-rpath,'$$ORIGIN' -lcuda

# A pool as PyTorch's expandable segments keep one (grows after an export).
CU_POOL        := $(CUDADRV_DIR)/cu_pool
$(CU_POOL): test/cudadrv/cu_pool.c $(CUDADRV_LIB)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -I$(CUDA_HOME)/include -o $@ $< -L$(CUDADRV_DIR) -Wl,-rpath,'$$ORIGIN' -lcuda

TEST_BINS += $(CUDADRV_LIB) $(CU_PAIR) $(CUDADRV_CHECK) $(CU_CHUNKS) $(CU_LIFE) $(CU_POOL)

# make bench's first VMM open at first contact (scripts/bench.sh): the GPU
# host's vmm_cold (test/gpu), on the double.
VMM_COLD       := $(CUDADRV_DIR)/vmm_cold
$(VMM_COLD): test/gpu/vmm_cold.c test/gpu/gpu_c.h $(CUDADRV_LIB)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -I$(CUDA_HOME)/include -o $@ $< -L$(CUDADRV_DIR) -Wl,-rpath,'$$ORIGIN' -lcuda
BENCH_BINS += $(VMM_COLD)

-include $(CUDADRV_OBJ:.o=.d) $(CU_PAIR_OBJ:.o=.d) $(CU_CHUNKS).d

endif
