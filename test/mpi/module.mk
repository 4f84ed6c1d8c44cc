# SPDX-License-Identifier: MIT
# Test applications that know nothing about ipcbyval (see zeapp.h):
#   ze_pair                   fork()ed exporter/importer, linked to the loader
#   ze_pair_dl                the same, reaching the loader by dlopen only
#   ze_life                   lifetimes: churn, repeating ids, double close, context reuse
#   ze_pool_life              event-pool lifetimes: destroy, exit, reopen, context, double close
#   ze_newapi                 the entry points newer than loader 1.8.12 (with properties, fd <-> handle, puts)
#   ze_mpi_exchange_ompi[_dl]  MPI ring exchange built with Open MPI's mpicc
#   ze_mpi_exchange_mpich[_dl] the same with MPICH's mpicc.mpich
# The _dl binaries have no DT_NEEDED on libze_loader (--route symbol is
# refused there): the loader arrives by dlopen(RTLD_LOCAL) only, as in
# oneCCL and libfabric. The MPI programs are built only where the compiler
# wrapper exists.

ZEAPP_DIR  := $(BUILD)/test/mpi
ZEAPP_SRC  := test/mpi/zeapp.c test/mpi/zeapp_data.c test/mpi/zeapp_events.c
ZEAPP_DEPS := $(ZEAPP_SRC) test/mpi/zeapp.h test/mpi/module.mk
ZEAPP_LINK := -DZEAPP_LINKED -lze_loader -ldl
ZEAPP_DL   := -ldl

# Open MPI's wrapper answers -showme; a mpicc that is MPICH's does not.
MPICC_OMPI  ?= $(shell mpicc -showme:version >/dev/null 2>&1 && command -v mpicc)
MPICC_MPICH ?= $(shell command -v mpicc.mpich 2>/dev/null)

ZEAPP_BINS := $(ZEAPP_DIR)/ze_pair $(ZEAPP_DIR)/ze_pair_dl $(ZEAPP_DIR)/ze_life \
              $(ZEAPP_DIR)/ze_pool_life $(ZEAPP_DIR)/ze_newapi
ifneq ($(MPICC_OMPI),)
ZEAPP_BINS += $(ZEAPP_DIR)/ze_mpi_exchange_ompi $(ZEAPP_DIR)/ze_mpi_exchange_ompi_dl
endif
ifneq ($(MPICC_MPICH),)
ZEAPP_BINS += $(ZEAPP_DIR)/ze_mpi_exchange_mpich $(ZEAPP_DIR)/ze_mpi_exchange_mpich_dl
endif
TEST_BINS += $(ZEAPP_BINS)

.PHONY: zeapps
zeapps: $(ZEAPP_BINS)

$(ZEAPP_DIR)/ze_pair: test/mpi/ze_pair.c $(ZEAPP_DEPS)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(ZEAPP_SRC) $(ZEAPP_LINK)

$(ZEAPP_DIR)/ze_life: test/mpi/ze_life.c $(ZEAPP_DEPS)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(ZEAPP_SRC) $(ZEAPP_LINK)

$(ZEAPP_DIR)/ze_pool_life: test/mpi/ze_pool_life.c $(ZEAPP_DEPS)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(ZEAPP_SRC) $(ZEAPP_LINK)

$(ZEAPP_DIR)/ze_newapi: test/mpi/ze_newapi.c $(ZEAPP_DEPS)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(ZEAPP_SRC) $(ZEAPP_LINK)

$(ZEAPP_DIR)/ze_pair_dl: test/mpi/ze_pair.c $(ZEAPP_DEPS)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $< $(ZEAPP_SRC) $(ZEAPP_DL)

# The wrappers compile with $(CC) too, so sanitizer runtimes match.
$(ZEAPP_DIR)/ze_mpi_exchange_ompi: test/mpi/ze_mpi_exchange.c $(ZEAPP_DEPS)
	@mkdir -p $(dir $@)
	$(call say,MPICC,$@)OMPI_CC=$(CC) $(MPICC_OMPI) $(ALL_CFLAGS) -o $@ $< $(ZEAPP_SRC) $(ZEAPP_LINK)

$(ZEAPP_DIR)/ze_mpi_exchange_ompi_dl: test/mpi/ze_mpi_exchange.c $(ZEAPP_DEPS)
	@mkdir -p $(dir $@)
	$(call say,MPICC,$@)OMPI_CC=$(CC) $(MPICC_OMPI) $(ALL_CFLAGS) -o $@ $< $(ZEAPP_SRC) $(ZEAPP_DL)

$(ZEAPP_DIR)/ze_mpi_exchange_mpich: test/mpi/ze_mpi_exchange.c $(ZEAPP_DEPS)
	@mkdir -p $(dir $@)
	$(call say,MPICC,$@)MPICH_CC=$(CC) $(MPICC_MPICH) $(ALL_CFLAGS) -o $@ $< $(ZEAPP_SRC) $(ZEAPP_LINK)

$(ZEAPP_DIR)/ze_mpi_exchange_mpich_dl: test/mpi/ze_mpi_exchange.c $(ZEAPP_DEPS)
	@mkdir -p $(dir $@)
	$(call say,MPICC,$@)MPICH_CC=$(CC) $(MPICC_MPICH) $(ALL_CFLAGS) -o $@ $< $(ZEAPP_SRC) $(ZEAPP_DL)
