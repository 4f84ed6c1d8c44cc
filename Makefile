# SPDX-License-Identifier: MIT
# ipcbyval - top-level build. Module fragments (*/module.mk) add sources,
# tests and rules; this file owns flags, the library, install and check.

VERSION     := 0.1.0
SONAME      := libipcbyval.so.1
PREFIX      ?= /usr/local
DESTDIR     ?=
LIBDIR      ?= $(PREFIX)/lib
BINDIR      ?= $(PREFIX)/bin
MANDIR      ?= $(PREFIX)/share/man
INSTALL     ?= install
CC          ?= cc
CUDA_HOME   ?= /usr/local/cuda

# SAN=asan|tsan builds everything into its own tree.
SAN         ?=
ifeq ($(SAN),asan)
BUILD       ?= build-asan
SANFLAGS    := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
else ifeq ($(SAN),tsan)
BUILD       ?= build-tsan
SANFLAGS    := -fsanitize=thread -fno-omit-frame-pointer
else
BUILD       ?= build
SANFLAGS    :=
endif

OPT         ?= -O2
WARN        := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
CFLAGS      ?= $(OPT) -g
EXTRA_INC   ?=
ALL_CFLAGS  := -std=gnu11 $(WARN) -fPIC -I. $(EXTRA_INC) -D_GNU_SOURCE \
               -DBYVAL_VERSION=\"$(VERSION)\" $(SANFLAGS) $(CFLAGS)
LIB_CFLAGS  := $(ALL_CFLAGS) -fvisibility=hidden
LDLIBS_LIB  := -ldl -lpthread

LIB         := $(BUILD)/$(SONAME)
LIB_LINK    := $(BUILD)/libipcbyval.so

# Filled by module fragments.
LIB_SRC     :=
UNIT_TESTS  :=
TEST_BINS   :=
BENCH_BINS  :=
FAULT_TESTS :=
INTEG_TESTS :=
CLEAN_EXTRA :=

include cache/module.mk
include handles/module.mk
include shim/module.mk
-include test/module.mk

LIB_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRC))

.PHONY: all lib tests check check-all check-asan check-tsan demo demo-run bench bench-gpu check-gpu gpu-deps check-faults \
        fuzz install uninstall clean deps help

all: lib

help:
	@echo "make            build $(LIB)"
	@echo "make demo       2-rank MPI job: IPC handles by value, without and with ipcbyval"
	@echo "make check      unit + integration tests, man page lint (installs deps)"
	@echo "make check-asan / check-tsan   the same under sanitizers"
	@echo "make bench      benchmark table"
	@echo "make fuzz       libFuzzer runs: decoder, manifest reader, broker requests (FUZZ_SECONDS=60 each)"
	@echo "make install PREFIX=... DESTDIR=..."

deps:
	@scripts/deps.sh

lib: $(LIB) $(LIB_LINK)

# Objects depend on the flags they were built with: changing CFLAGS,
# SAN or finding the CUDA headers rebuilds them.
FLAGS_STAMP := $(BUILD)/.flags-$(shell echo '$(CC) $(LIB_CFLAGS)' | md5sum | cut -c1-12)
$(FLAGS_STAMP):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/.flags-*
	@touch $@

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) -MMD -MP -c -o $@ $<

$(LIB): $(LIB_OBJ) shim/ipcbyval.map
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=shim/ipcbyval.map \
	    -Wl,-z,defs -Wl,-z,now $(SANFLAGS) -o $@ $(LIB_OBJ) $(LDLIBS_LIB)

$(LIB_LINK): $(LIB)
	ln -sf $(SONAME) $@

tests: lib $(UNIT_TESTS) $(TEST_BINS)

check: deps
	@$(MAKE) --no-print-directory check-all

check-all: tests
	@BUILD=$(BUILD) SAN=$(SAN) scripts/run-checks.sh $(UNIT_TESTS) -- $(INTEG_TESTS) $(FAULT_TESTS)

# The fault and abuse suite alone (it is part of make check too).
check-faults: deps
	@$(MAKE) --no-print-directory tests
	@BUILD=$(BUILD) SAN=$(SAN) scripts/run-checks.sh -- $(FAULT_TESTS)

# Benchmarks: a table of medians and ratios measured in one run.
bench: deps
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory lib tests $(BENCH_BINS)
	@BUILD=$(BUILD) scripts/bench.sh

check-asan:
	@$(MAKE) --no-print-directory SAN=asan OPT=-O1 check

check-tsan:
	@$(MAKE) --no-print-directory SAN=tsan OPT=-O1 check

demo: deps
	@$(MAKE) --no-print-directory demo-run

demo-run: lib $(ZEDRV_LIB) $(BUILD)/test/mpi/ze_mpi_exchange_ompi
	@scripts/demo.sh

# On a GPU machine (no package registry there): build and run every GPU
# test, print a summary table. GPU_DEPS=dir supplies the Level Zero and
# uthash headers copied from a Debian machine (make gpu-deps).
check-gpu:
	@EXTRA_INC="$(if $(wildcard .gpu-deps/include),-I$(abspath .gpu-deps/include))" scripts/check-gpu.sh

bench-gpu:
	@EXTRA_INC="$(if $(wildcard .gpu-deps/include),-I$(abspath .gpu-deps/include))" scripts/bench-gpu.sh

gpu-deps:
	@mkdir -p .gpu-deps/include
	cp -r /usr/include/level_zero /usr/include/uthash.h .gpu-deps/include/

install: lib
	$(INSTALL) -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man7
	$(INSTALL) -m 0755 $(LIB) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libipcbyval.so
	sed -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@VERSION@|$(VERSION)|g' scripts/ipcbyval-run \
	    > $(DESTDIR)$(BINDIR)/ipcbyval-run
	chmod 0755 $(DESTDIR)$(BINDIR)/ipcbyval-run
	$(INSTALL) -m 0644 man/ipcbyval-run.1 $(DESTDIR)$(MANDIR)/man1/
	$(INSTALL) -m 0644 man/ipcbyval.7 $(DESTDIR)$(MANDIR)/man7/

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libipcbyval.so \
	      $(DESTDIR)$(BINDIR)/ipcbyval-run $(DESTDIR)$(MANDIR)/man1/ipcbyval-run.1 \
	      $(DESTDIR)$(MANDIR)/man7/ipcbyval.7

clean:
	rm -rf build build-asan build-tsan build-fuzz $(CLEAN_EXTRA)

-include $(LIB_OBJ:.o=.d)
