# SPDX-License-Identifier: MIT
# The fault and abuse suite (make check-faults; part of make check).
FAULT_BIN := $(BUILD)/test/faults/fault_main
FAULT_SRC := test/faults/fault_main.c test/faults/fault_more.c test/faults/fault_exporter.c \
             test/faults/fault_xns.c test/faults/fault_registry.c $(ZEAPP_SRC)
TEST_BINS += $(FAULT_BIN)
FAULT_TESTS += test/faults/test_faults.sh

$(FAULT_BIN): $(FAULT_SRC) test/faults/fault.h test/mpi/zeapp.h $(BUILD)/handles/wire.o
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $(FAULT_SRC) $(BUILD)/handles/wire.o -DZEAPP_LINKED -lze_loader -ldl -lpthread

# A same-uid bystander against an exporter's broker after its export ended
# (test_stale.sh).
FAULT_STALE := $(BUILD)/test/faults/fault_stale
TEST_BINS += $(FAULT_STALE)
FAULT_TESTS += test/faults/test_stale.sh
$(FAULT_STALE): test/faults/fault_stale.c test/faults/stale_peer.c test/faults/fault_exporter.c \
		$(ZEAPP_SRC) test/faults/fault.h test/faults/stale_peer.h test/mpi/zeapp.h
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $(filter %.c,$^) -DZEAPP_LINKED -lze_loader -ldl -lpthread

# Threads and fork on the CUDA path, against the driver double.
ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)
FAULT_CUDA := $(BUILD)/test/faults/fault_cuda
FAULT_STALE_CU := $(BUILD)/test/faults/fault_stale_cu
TEST_BINS += $(FAULT_CUDA) $(FAULT_STALE_CU)
$(FAULT_STALE_CU): test/faults/fault_stale_cu.c test/faults/stale_peer.c test/faults/stale_peer.h \
                   $(BUILD)/test/cudadrv/cu_pair_drv.o $(BUILD)/handles/wire.o
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -I$(CUDA_HOME)/include -o $@ $(filter %.c %.o,$^) -ldl
$(FAULT_CUDA): test/faults/fault_cuda.c $(BUILD)/test/cudadrv/cu_pair_drv.o $(BUILD)/handles/wire.o \
               $(BUILD)/handles/self.o
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -I$(CUDA_HOME)/include -o $@ $< $(filter %.o,$^) -ldl -lpthread
endif
