# SPDX-License-Identifier: MIT
LIB_SRC += handles/wire.c handles/self.c handles/resolve.c handles/broker.c handles/nsxlate.c
HANDLES_OBJ = $(BUILD)/handles/wire.o $(BUILD)/handles/self.o $(BUILD)/handles/resolve.o

UNIT_TESTS += $(BUILD)/test/unit/test_wire $(BUILD)/test/unit/test_resolve
$(BUILD)/test/unit/test_wire: test/unit/test_wire.c $(HANDLES_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(HANDLES_OBJ) -lcmocka

$(BUILD)/test/unit/test_resolve: test/unit/test_resolve.c $(HANDLES_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(HANDLES_OBJ) -lcmocka -lpthread

# libFuzzer target for the decoder: make fuzz FUZZ_SECONDS=60
FUZZ_SECONDS ?= 60
FUZZ_BIN := build-fuzz/fuzz_wire
$(FUZZ_BIN): test/fuzz/fuzz_wire.c handles/wire.c handles/wire.h
	@mkdir -p $(dir $@) build-fuzz/corpus
	clang -std=gnu11 -g -O1 -I. -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
	    -o $@ test/fuzz/fuzz_wire.c handles/wire.c

fuzz:
	@scripts/deps.sh fuzz
	@$(MAKE) --no-print-directory $(FUZZ_BIN)
	$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 build-fuzz/corpus
