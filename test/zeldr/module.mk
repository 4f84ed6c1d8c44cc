# SPDX-License-Identifier: MIT
# zeldr: a stand-in for a spec-1.15 Level Zero loader (libze_loader.so.1 in
# its own folder), for the routes Debian's 1.8.12 loader does not have.
ZELDR_DIR := $(BUILD)/test/zeldr
ZELDR_LIB := $(ZELDR_DIR)/libze_loader.so.1
TEST_BINS += $(ZELDR_LIB)

$(ZELDR_LIB): test/zeldr/zeldr.c test/zeldr/module.mk
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -fvisibility=hidden -shared -Wl,-soname,libze_loader.so.1 \
	    -o $@ $< -ldl -lpthread
