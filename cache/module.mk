# SPDX-License-Identifier: MIT
# cache/: the bounded cache with lock-free hits (lru.c) and the pointer map (ptrmap.c);
# the lifecycles of imports (imports*.c) and exports (exports*.c) over them;
# locks.c: every lock's rank, the one fork handler and byval_once (handles/ and shim/ use it too).
LIB_SRC += cache/locks.c cache/exports.c cache/exporters.c cache/imports.c cache/lru.c cache/stripe.c cache/ptrmap.c
CACHE_OBJ = $(BUILD)/cache/locks.o $(BUILD)/cache/exports.o $(BUILD)/cache/imports.o $(BUILD)/cache/lru.o $(BUILD)/cache/stripe.o $(BUILD)/cache/ptrmap.o

LRU_TEST_SRC = test/unit/test_lru.c test/unit/test_lru_model.c test/unit/test_lru_threads.c \
               test/unit/test_lru_ref.c test/unit/test_lru_hash.c

UNIT_TESTS += $(BUILD)/test/unit/test_lru
$(BUILD)/test/unit/test_lru: test/unit/test_lru.h $(LRU_TEST_SRC) $(CACHE_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $(LRU_TEST_SRC) $(CACHE_OBJ) -lcmocka -lpthread

UNIT_TESTS += $(BUILD)/test/unit/test_once
$(BUILD)/test/unit/test_once: test/unit/test_once.c $(CACHE_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(CACHE_OBJ) -lcmocka -lpthread

UNIT_TESTS += $(BUILD)/test/unit/test_lru_put
$(BUILD)/test/unit/test_lru_put: test/unit/test_lru_put.c $(CACHE_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(CACHE_OBJ) -lcmocka -lpthread

UNIT_TESTS += $(BUILD)/test/unit/test_imports
$(BUILD)/test/unit/test_imports: test/unit/test_imports.c $(CACHE_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(CACHE_OBJ) -lcmocka -lpthread

UNIT_TESTS += $(BUILD)/test/unit/test_ptrmap_tally
$(BUILD)/test/unit/test_ptrmap_tally: test/unit/test_ptrmap_tally.c $(CACHE_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(CACHE_OBJ) -lcmocka -lpthread

UNIT_TESTS += $(BUILD)/test/unit/test_exports
$(BUILD)/test/unit/test_exports: test/unit/test_exports.c $(CACHE_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(CACHE_OBJ) -lcmocka -lpthread

# The core's services: configuration, log, counters, initialisation, the doctor.
LIB_SRC += cache/config.c cache/log.c cache/stats.c cache/init.c cache/doctor.c

# Statistics alone: cache memory and the per-process file (config and log
# are the real ones; nothing else of the library).
STATS_TEST_OBJ = $(BUILD)/cache/stats.o $(BUILD)/cache/log.o \
                 $(BUILD)/cache/config.o $(BUILD)/handles/registry_fds.o $(BUILD)/handles/fdproof.o $(CACHE_OBJ) \
                 $(BUILD)/handles/rendezvous.o
UNIT_TESTS += $(BUILD)/test/unit/test_stats
$(BUILD)/test/unit/test_stats: test/unit/test_stats.c $(STATS_TEST_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $^ -lcmocka -lpthread

# The import flow and the transport policy: they need handles/ and the
# configuration, so they stay out of CACHE_OBJ (the cache unit tests).
LIB_SRC += cache/imports_flow.c cache/transport.c
