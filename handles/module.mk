# SPDX-License-Identifier: MIT
# handles/: the by-value record (wire.c; tag.c its keyed tags; manifest.c
# the CUDA VMM manifest), who a process is (self.c), the exporter's
# registry (registry.c; registry_fds.c the same by fd number, fdproof.c
# its proof), and the resolution of a record (resolve.c, the pipeline;
# fdcheck.c its fd checks), its socket routes (broker_*.c, rendezvous.c)
# and the importers' registry views (registry_view.c, registry_watch.c).
HANDLES_SRC := handles/bgthread.c handles/wire.c handles/tag.c handles/self.c handles/fdcheck.c \
               handles/manifest.c handles/registry.c handles/registry_fds.c handles/fdproof.c
TRANSPORT_SRC := handles/broker_serve.c handles/broker_fetch.c handles/rendezvous.c \
                 handles/resolve.c handles/registry_view.c handles/registry_watch.c
LIB_SRC += $(HANDLES_SRC) $(TRANSPORT_SRC)
HANDLES_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(HANDLES_SRC) $(TRANSPORT_SRC)) $(BUILD)/cache/locks.o

UNIT_TESTS += $(BUILD)/test/unit/test_wire $(BUILD)/test/unit/test_resolve $(BUILD)/test/unit/test_manifest \
              $(BUILD)/test/unit/test_fdcheck
HANDLES_ALL_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(HANDLES_SRC) $(TRANSPORT_SRC)) $(BUILD)/cache/locks.o
FDCHECK_TEST_SRC := test/unit/test_fdcheck.c test/unit/test_fdcheck_fuse.c
$(BUILD)/test/unit/test_fdcheck: $(FDCHECK_TEST_SRC) test/unit/test_fdcheck.h test/unit/test_skip.h \
                                 $(HANDLES_ALL_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $(FDCHECK_TEST_SRC) $(HANDLES_ALL_OBJ) -lcmocka -lpthread
$(BUILD)/test/unit/test_manifest: test/unit/test_manifest.c $(BUILD)/handles/manifest.o $(BUILD)/handles/wire.o
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/handles/manifest.o $(BUILD)/handles/wire.o -lcmocka

$(BUILD)/test/unit/test_wire: test/unit/test_wire.c $(BUILD)/handles/wire.o
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/handles/wire.o -lcmocka

RESOLVE_TEST_SRC := test/unit/test_resolve.c test/unit/test_resolve_more.c \
                    test/unit/test_resolve_util.c
$(BUILD)/test/unit/test_resolve: $(RESOLVE_TEST_SRC) test/unit/test_resolve.h test/unit/test_skip.h \
                                 $(HANDLES_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $(RESOLVE_TEST_SRC) $(HANDLES_OBJ) -lcmocka -lpthread

# libFuzzer targets: make fuzz FUZZ_SECONDS=60 runs each that long. Their
# own tree (build-fuzz/), whatever SAN says: libFuzzer wants clang and its
# own sanitizer set, and UBSan must abort rather than print and go on.
#   fuzz_wire         the record decoder (handles/wire.c)
#   fuzz_broker_req   the socket fallback's request parser (broker_internal.h)
#   fuzz_manifest     the CUDA VMM manifest reader (manifest.c)
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FUZZ_DIR := build-fuzz
FUZZ_FLAGS := -std=gnu11 -g -O1 -I. -D_GNU_SOURCE -Wall -Wextra -Werror \
              -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_TARGETS := fuzz_wire fuzz_manifest fuzz_broker_req
FUZZ_SRC_fuzz_wire := handles/wire.c
FUZZ_SRC_fuzz_broker_req :=
FUZZ_SRC_fuzz_manifest := handles/manifest.c handles/wire.c
FUZZ_OPTS_fuzz_manifest := -max_len=24700 # up to a 1024-chunk manifest
FUZZ_BINS := $(addprefix $(FUZZ_DIR)/,$(FUZZ_TARGETS))
# A crash's input goes here, not into the folder make was run from.
FUZZ_ARTIFACTS := build/fuzz-artifacts/

$(FUZZ_DIR)/%: test/fuzz/%.c handles/wire.h handles/broker_internal.h handles/manifest.h \
               handles/module.mk
	@mkdir -p $(dir $@) $(FUZZ_DIR)/corpus-$*
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< $(FUZZ_SRC_$*)

$(FUZZ_DIR)/fuzz_wire: handles/wire.c
$(FUZZ_DIR)/fuzz_manifest: handles/manifest.c handles/wire.c

fuzz:
	@scripts/deps.sh fuzz
	@$(MAKE) --no-print-directory $(FUZZ_BINS)
	@mkdir -p $(FUZZ_ARTIFACTS)
	$(foreach t,$(FUZZ_TARGETS),$(FUZZ_DIR)/$(t) -max_total_time=$(FUZZ_SECONDS) \
	    -artifact_prefix=$(FUZZ_ARTIFACTS)$(t)- -print_final_stats=1 $(FUZZ_OPTS_$(t)) $(FUZZ_DIR)/corpus-$(t) &&) true
