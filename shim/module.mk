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

# The dlsym path runs inside sanitizer runtimes' own initialisation (they
# resolve their interceptors with dlsym(RTLD_NEXT)), before their shadow
# memory exists: it must not be instrumented.
NO_SAN_OBJ := $(BUILD)/shim/dlsym.o
$(NO_SAN_OBJ): LIB_CFLAGS := $(filter-out -fsanitize=% -fno-sanitize-recover=all,$(LIB_CFLAGS))

# The exporters table alone (its log and counters stubbed by the test).
UNIT_TESTS += $(BUILD)/test/unit/test_exporters
$(BUILD)/test/unit/test_exporters: test/unit/test_exporters.c test/unit/test_skip.h \
                                   $(BUILD)/cache/exporters.o $(patsubst %.c,$(BUILD)/%.o,$(HANDLES_SRC) $(TRANSPORT_SRC)) \
                                   $(BUILD)/cache/stripe.o $(BUILD)/cache/locks.o
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $(filter-out %.h,$^) -lcmocka -lpthread

# The lock order and fork (cache/locks.h) with every module linked in, so
# that every registered lock is there (the shim's too).
UNIT_TESTS += $(BUILD)/test/unit/test_locks
LOCKS_TEST_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRC))
$(BUILD)/test/unit/test_locks: test/unit/test_locks.c test/unit/test_skip.h $(LOCKS_TEST_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(LOCKS_TEST_OBJ) -ldl -lcmocka -lpthread
