# SPDX-License-Identifier: MIT
# The import-lifecycle stress workload (test/stress/stress.h) and the quiet
# demo loop: short in make check, long in make torture.
STRESS_COMMON := test/stress/stress_main.c test/stress/stress_exp.c test/stress/stress_imp.c
STRESS_ZE     := $(BUILD)/test/stress/stress_ze
TEST_BINS     += $(STRESS_ZE)
FAULT_TESTS   += test/stress/test_stress.sh test/stress/test_demo_quiet.sh
TORTURE_TESTS += test/stress/test_stress.sh test/stress/test_demo_quiet.sh

$(STRESS_ZE): $(STRESS_COMMON) test/stress/stress_ze.c test/stress/stress.h $(ZEAPP_SRC) \
              test/mpi/zeapp.h
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -o $@ $(STRESS_COMMON) test/stress/stress_ze.c \
	    $(ZEAPP_SRC) -DZEAPP_LINKED -lze_loader -ldl -lpthread

# The CUDA variants link libcuda: the double here (scripts/check-gpu.sh
# builds the same source against the real driver).
ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)
STRESS_CU := $(BUILD)/test/stress/stress_cu
TEST_BINS += $(STRESS_CU)
$(STRESS_CU): $(STRESS_COMMON) test/stress/stress_cu.c test/stress/stress.h $(CUDADRV_LIB)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)$(CC) $(ALL_CFLAGS) -I$(CUDA_HOME)/include -o $@ $(STRESS_COMMON) \
	    test/stress/stress_cu.c -L$(CUDADRV_DIR) -lcuda -ldl -lpthread
endif
