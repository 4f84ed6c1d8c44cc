# SPDX-License-Identifier: MIT
# handles/: the by-value record (wire.c, pure), who we are (self.c), and
# pidfd resolution (resolve.c, fdcheck.c), the exporter registry (registry.c;
# registry_view.c is the importers' reader and watcher); broker*.c and nsxlate.c are the
# socket fallback and the pid translation, transport.c the policy over all.
HANDLES_SRC := handles/wire.c handles/self.c handles/resolve.c handles/fdcheck.c handles/registry.c
TRANSPORT_SRC := handles/broker_serve.c handles/broker_fetch.c handles/nsxlate.c \
                 handles/transport.c handles/registry_view.c handles/registry_short.c
LIB_SRC += $(HANDLES_SRC) $(TRANSPORT_SRC)
HANDLES_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(HANDLES_SRC))

UNIT_TESTS += $(BUILD)/test/unit/test_wire $(BUILD)/test/unit/test_resolve
$(BUILD)/test/unit/test_wire: test/unit/test_wire.c $(BUILD)/handles/wire.o
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/handles/wire.o -lcmocka

RESOLVE_TEST_SRC := test/unit/test_resolve.c test/unit/test_resolve_more.c \
                    test/unit/test_resolve_util.c
$(BUILD)/test/unit/test_resolve: $(RESOLVE_TEST_SRC) test/unit/test_resolve.h test/unit/test_skip.h \
                                 handles/resolve_internal.h $(HANDLES_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $(RESOLVE_TEST_SRC) $(HANDLES_OBJ) -lcmocka -lpthread

# libFuzzer target for the decoder: make fuzz FUZZ_SECONDS=60. Its own
# tree (build-fuzz/), whatever SAN says: libFuzzer wants clang and its own
# sanitizer set, and UBSan must abort rather than print and go on.
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FUZZ_DIR := build-fuzz
FUZZ_BIN := $(FUZZ_DIR)/fuzz_wire
$(FUZZ_BIN): test/fuzz/fuzz_wire.c handles/wire.c handles/wire.h handles/module.mk
	@mkdir -p $(dir $@) $(FUZZ_DIR)/corpus
	$(call say,LD,$@)$(FUZZ_CC) -std=gnu11 -g -O1 -I. -D_GNU_SOURCE -Wall -Wextra -Werror \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    -o $@ test/fuzz/fuzz_wire.c handles/wire.c

fuzz:
	@scripts/deps.sh fuzz
	@$(MAKE) --no-print-directory $(FUZZ_BIN)
	$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $(FUZZ_DIR)/corpus
