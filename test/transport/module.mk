# SPDX-License-Identifier: MIT
DENY_GETFD := $(BUILD)/test/transport/deny_getfd
TEST_BINS += $(DENY_GETFD)
INTEG_TESTS += test/transport/test_transport.sh test/transport/test_xns.sh

$(DENY_GETFD): test/transport/deny_getfd.c
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $<

# The transport on handles/ alone (no shim): unit tests of the broker, the
# pid translation and the policy, and xfer, the exporter/importer pair the
# namespace and uid cases of test_xfer.sh run.
TRANSPORT_TEST_OBJ = $(HANDLES_ALL_OBJ)
XFER := $(BUILD)/test/transport/xfer
TEST_BINS += $(XFER)
UNIT_TESTS += $(BUILD)/test/unit/test_broker $(BUILD)/test/unit/test_transport \
              $(BUILD)/test/unit/test_registry $(BUILD)/test/unit/test_registry_fds \
              $(BUILD)/test/unit/test_registry_hostile $(BUILD)/test/unit/test_registry_wake \
              $(BUILD)/test/unit/test_registry_demand \
              $(BUILD)/test/unit/test_registry_attach
INTEG_TESTS += test/transport/test_xfer.sh

$(XFER): test/transport/xfer.c $(TRANSPORT_TEST_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(TRANSPORT_TEST_OBJ) -lpthread

$(BUILD)/test/unit/test_broker $(BUILD)/test/unit/test_transport $(BUILD)/test/unit/test_registry \
$(BUILD)/test/unit/test_registry_fds $(BUILD)/test/unit/test_registry_attach: \
		$(BUILD)/test/unit/%: test/unit/%.c $(TRANSPORT_TEST_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(TRANSPORT_TEST_OBJ) -lcmocka -lpthread

# Hostile peers of the registry page and pipe (issue 22): its helpers'
# processes in test_registry_peers.c.
$(BUILD)/test/unit/test_registry_hostile: test/unit/test_registry_hostile.c \
		test/unit/test_registry_peers.c test/unit/test_registry_peers.h $(TRANSPORT_TEST_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $(filter %.c,$^) $(TRANSPORT_TEST_OBJ) -lcmocka -lpthread

# No free's wake-up lost to another importer of the same exporter (issue
# 22): the same peers; the second importer is this program exec'ed.
$(BUILD)/test/unit/test_registry_wake: test/unit/test_registry_wake.c \
		test/unit/test_registry_peers.c test/unit/test_registry_peers.h $(TRANSPORT_TEST_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $(filter %.c,$^) $(TRANSPORT_TEST_OBJ) -lcmocka -lpthread

# The watcher on demand (issue 23): the same exporter peer.
$(BUILD)/test/unit/test_registry_demand: test/unit/test_registry_demand.c \
		test/unit/test_registry_peers.c test/unit/test_registry_peers.h $(TRANSPORT_TEST_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $(filter %.c,$^) $(TRANSPORT_TEST_OBJ) -lcmocka -lpthread

# fdshare: PyTorch's expandable-segment pattern (its own pidfd_getfd) on
# the CUDA double, for the pidfd_getfd rescue (test_rescue.sh).
ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)
FDSHARE := $(BUILD)/test/transport/fdshare
TEST_BINS += $(FDSHARE)
$(FDSHARE): test/transport/fdshare.c test/cudadrv/cu_pair.h $(BUILD)/test/cudadrv/cu_pair_drv.o
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -I$(CUDA_HOME)/include -o $@ $< $(BUILD)/test/cudadrv/cu_pair_drv.o -ldl
endif
INTEG_TESTS += test/transport/test_rescue.sh
-include test/transport/rendezvous.mk

# Hostile peers of an exporter's broker (test_hostile.sh): the exporter on
# handles/ alone and attackers that speak the broker's protocol themselves.
HOSTILE := $(BUILD)/test/transport/hostile
TEST_BINS += $(HOSTILE)
INTEG_TESTS += test/transport/test_hostile.sh

$(HOSTILE): test/transport/hostile.c $(TRANSPORT_TEST_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(TRANSPORT_TEST_OBJ) -lpthread
