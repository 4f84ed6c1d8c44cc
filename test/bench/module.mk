# SPDX-License-Identifier: MIT
# Benchmarks (make bench): bench_lru times the cache alone, bench_pidfd the
# resolution a cold open adds; bench_ze is an
# ordinary Level Zero program (it knows nothing about ipcbyval) that
# scripts/bench.sh runs natively and under ipcbyval-run.

BENCH_DIR  := $(BUILD)/test/bench
BENCH_BINS += $(BENCH_DIR)/bench_lru $(BENCH_DIR)/bench_ze $(BENCH_DIR)/bench_pidfd \
              $(BENCH_DIR)/bench_syscall $(BENCH_DIR)/bench_imports

$(BENCH_DIR)/bench_lru: test/bench/bench_lru.c $(CACHE_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(CACHE_OBJ) -lpthread

# The import cache at scale as the shim uses it (imports, pointer map,
# liveness word): hit latency and resident bytes per entry at 1M entries.
$(BENCH_DIR)/bench_imports: test/bench/bench_imports.c $(CACHE_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(CACHE_OBJ) -lpthread

# The resolution a cold open adds, on handles/ alone (no GPU, no loader).
$(BENCH_DIR)/bench_pidfd: test/bench/bench_pidfd.c $(HANDLES_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(HANDLES_OBJ) -lpthread

# Linked to the loader like any application: the preload interposes on
# the symbols, exactly as it would for a user's program.
$(BENCH_DIR)/bench_ze: test/bench/bench_ze.c test/bench/bench_ze_peer.c test/bench/bench_ze.h $(ZEAPP_DEPS)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< test/bench/bench_ze_peer.c $(ZEAPP_SRC) $(ZEAPP_LINK)

# What the interposed syscall() adds to other system calls (an ordinary
# program; scripts/bench.sh runs it under ipcbyval-run).
$(BENCH_DIR)/bench_syscall: test/bench/bench_syscall.c
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< -ldl

# A sampling profiler for the bench scripts: the GPU host has a PMU but no
# perf(1) to read it (pmuprof.c says what it prints).
BENCH_BINS += $(BENCH_DIR)/pmuprof
$(BENCH_DIR)/pmuprof: test/bench/pmuprof.c test/bench/pmuprof_sym.c test/bench/pmuprof.h
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ test/bench/pmuprof.c test/bench/pmuprof_sym.c
