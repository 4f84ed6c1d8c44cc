# SPDX-License-Identifier: MIT
# Benchmarks (make bench): bench_lru times the cache alone; bench_ze is an
# ordinary Level Zero program (it knows nothing about ipcbyval) that
# scripts/bench.sh runs natively and under ipcbyval-run.

BENCH_DIR  := $(BUILD)/test/bench
BENCH_BINS += $(BENCH_DIR)/bench_lru $(BENCH_DIR)/bench_ze

$(BENCH_DIR)/bench_lru: test/bench/bench_lru.c $(CACHE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(CACHE_OBJ) -lpthread

# Linked to the loader like any application: the preload interposes on
# the symbols, exactly as it would for a user's program.
$(BENCH_DIR)/bench_ze: test/bench/bench_ze.c $(ZEAPP_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(ZEAPP_SRC) $(ZEAPP_LINK)
