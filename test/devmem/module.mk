# SPDX-License-Identifier: MIT
# devmem: the device-memory ledger that the CUDA double and the Level Zero
# test driver link (each library gets its own copy of the state), and
# devmem_info, which prints a ledger's totals for shell tests.
DEVMEM_OBJ  := $(BUILD)/test/devmem/devmem.o
DEVMEM_INFO := $(BUILD)/test/devmem/devmem_info

$(DEVMEM_INFO): test/devmem/devmem_info.c $(DEVMEM_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(DEVMEM_OBJ) -lpthread

TEST_BINS += $(DEVMEM_INFO)
-include $(DEVMEM_OBJ:.o=.d)
