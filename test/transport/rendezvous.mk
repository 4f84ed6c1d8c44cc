# SPDX-License-Identifier: MIT
# The rendezvous directory (issue 24): rdv_ze and rdv_cu, an exporter and
# an importer as separate programs sharing only a directory (rdv_pair.h),
# run by test_rendezvous.sh with each side in its own pid, network and
# mount namespaces.
RDV_DIR := $(BUILD)/test/transport
RDV_ZE  := $(RDV_DIR)/rdv_ze
TEST_BINS += $(RDV_ZE)
INTEG_TESTS += test/transport/test_rendezvous.sh

$(RDV_ZE): test/transport/rdv_ze.c test/transport/rdv_pair.c test/transport/rdv_seq.c test/transport/rdv_pair.h test/io_all.h $(ZEAPP_DEPS)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ test/transport/rdv_ze.c test/transport/rdv_pair.c test/transport/rdv_seq.c \
	    $(ZEAPP_SRC) $(ZEAPP_LINK)

ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)
RDV_CU := $(RDV_DIR)/rdv_cu
TEST_BINS += $(RDV_CU)
$(RDV_CU): test/transport/rdv_cu.c test/transport/rdv_pair.c test/transport/rdv_seq.c test/transport/rdv_pair.h test/io_all.h \
           test/cudadrv/cu_pair.h $(BUILD)/test/cudadrv/cu_pair_drv.o
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -I$(CUDA_HOME)/include -o $@ test/transport/rdv_cu.c \
	    test/transport/rdv_pair.c test/transport/rdv_seq.c $(BUILD)/test/cudadrv/cu_pair_drv.o -ldl
endif

# The directory's checks, connect and listen in one process.
UNIT_TESTS += $(BUILD)/test/unit/test_rendezvous
$(BUILD)/test/unit/test_rendezvous: test/unit/test_rendezvous.c test/unit/test_skip.h $(TRANSPORT_TEST_OBJ)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(TRANSPORT_TEST_OBJ) -lcmocka -lpthread
