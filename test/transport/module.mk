# SPDX-License-Identifier: MIT
DENY_GETFD := $(BUILD)/test/transport/deny_getfd
TEST_BINS += $(DENY_GETFD)
INTEG_TESTS += test/transport/test_transport.sh

$(DENY_GETFD): test/transport/deny_getfd.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $<
