# SPDX-License-Identifier: MIT
# cache/: the bounded cache with lock-free hits (lru*.c) and the pointer map (ptrmap.c,
# vtally.c its count of pointers per mapping);
# the lifecycles of imports (imports*.c) and exports (exports*.c) over them;
# locks.c: every lock's rank and the one fork handler (handles/ and shim/ use it too);
# once.c: once-only initialisation that forks safely.
LIB_SRC += cache/locks.c cache/once.c cache/exports.c cache/exports_items.c cache/imports.c cache/lru.c cache/lru_remove.c cache/lru_put.c cache/lru_slab.c cache/lru_clock.c cache/lru_fork.c cache/stripe.c cache/ptrmap.c cache/vtally.c
CACHE_OBJ = $(BUILD)/cache/locks.o $(BUILD)/cache/once.o $(BUILD)/cache/exports.o $(BUILD)/cache/exports_items.o $(BUILD)/cache/imports.o $(BUILD)/cache/lru.o $(BUILD)/cache/lru_remove.o $(BUILD)/cache/lru_put.o $(BUILD)/cache/lru_slab.o $(BUILD)/cache/lru_clock.o $(BUILD)/cache/lru_fork.o $(BUILD)/cache/stripe.o $(BUILD)/cache/ptrmap.o $(BUILD)/cache/vtally.o

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

# The import flow and the transport policy: they need handles/ and the
# configuration, so they stay out of CACHE_OBJ (the cache unit tests).
LIB_SRC += cache/imports_flow.c cache/transport.c
