# SPDX-License-Identifier: MIT
# zedrv: the Level Zero test driver the real loader loads with
# ZE_ENABLE_ALT_DRIVERS=$(abspath $(ZEDRV_LIB)). See test/zedrv/README.md.

ZEDRV_NAME := libze_intel_gpu_byvaltest.so
ZEDRV_LIB  := $(BUILD)/test/zedrv/$(ZEDRV_NAME)
ZEDRV_SRC  := $(filter-out test/zedrv/zedrv_check.c,$(wildcard test/zedrv/*.c))
ZEDRV_OBJ  := $(patsubst %.c,$(BUILD)/%.o,$(ZEDRV_SRC))
ZEDRV_CHECK := $(BUILD)/test/zedrv/zedrv_check

TEST_BINS   += $(ZEDRV_LIB) $(BUILD)/test/$(ZEDRV_NAME) $(ZEDRV_CHECK)

.PHONY: zedrv
zedrv: $(ZEDRV_LIB) $(BUILD)/test/$(ZEDRV_NAME)

# Static pattern: wins over the library's $(BUILD)/%.o rule. Hidden by
# default; only the zeGet*ProcAddrTable getters and a few named entry
# points are exported.
$(ZEDRV_OBJ): $(BUILD)/test/zedrv/%.o: test/zedrv/%.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)$(CC) $(ALL_CFLAGS) -fvisibility=hidden -MMD -MP -c -o $@ $<

# The device-memory ledger (test/devmem) is linked in: its names are hidden.
$(ZEDRV_LIB): $(ZEDRV_OBJ) $(DEVMEM_OBJ)
	$(call say,LD,$@)$(CC) -shared -Wl,-soname,$(ZEDRV_NAME) -Wl,-z,defs $(SANFLAGS) -o $@ \
	    $(ZEDRV_OBJ) $(DEVMEM_OBJ) -lpthread

# The driver's self-check, through the real loader (test_zedrv.sh runs it).
$(ZEDRV_CHECK): test/zedrv/zedrv_check.c test/devmem/devmem.h
	@mkdir -p $(dir $@)
	$(call say,CC,$@)$(CC) $(ALL_CFLAGS) -o $@ $< -lze_loader -ldl

# The same library one level up, the path other fragments may expect.
$(BUILD)/test/$(ZEDRV_NAME): $(ZEDRV_LIB)
	ln -sf zedrv/$(ZEDRV_NAME) $@

-include $(ZEDRV_OBJ:.o=.d)
