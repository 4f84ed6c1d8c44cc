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
MODULEDIR   ?= $(PREFIX)/share/modulefiles
DOCDIR      ?= $(PREFIX)/share/doc/ipcbyval

# Plain `make` builds the library, whatever the fragments below define
# first (they add test rules before `all`).
.DEFAULT_GOAL := all

# Quiet by default: one short line per step ("CC shim/ze_import.c");
# V=1 prints every command in full.
V ?= 0
ifeq ($(V),1)
say :=
else
.SILENT:
say = printf '  %-6s %s\n' '$(1)' '$(2)';
endif

# SAN=asan|tsan builds everything into its own tree.
SAN         ?=
ifeq ($(SAN),asan)
BUILD       ?= build-asan
SANFLAGS    := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
else ifeq ($(SAN),tsan)
BUILD       ?= build-tsan
# and the lock order checked on every lock (cache/locks.h)
SANFLAGS    := -fsanitize=thread -fno-omit-frame-pointer -DBYVAL_LOCK_DEBUG
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
TORTURE_TESTS :=
INTEG_TESTS :=
CLEAN_EXTRA :=

include cache/module.mk
include handles/module.mk
include shim/module.mk
-include test/module.mk

LIB_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRC))

.PHONY: all lib tests check check-all check-asan check-tsan demo demo-bins demo-run bench bench-gpu check-gpu gpu-deps check-faults torture \
        fuzz install uninstall deb rpm clean deps help

all: lib

# Every target a user may type, one line each (test_docs.sh checks that
# the README, the man pages and this list agree).
help:
	@echo "ipcbyval $(VERSION) - on Debian bookworm; as root, missing packages are installed"
	@echo "  make              build $(LIB) (V=1 prints full commands)"
	@echo "  make demo         2-rank Open MPI job: IPC handles by value, without and with ipcbyval"
	@echo "  make demo-bins    build what the demo runs, to run it by hand (see the README)"
	@echo "  make check        unit + integration tests (Open MPI, MPICH, Slurm), man page lint"
	@echo "  make check-asan   the same under ASan/UBSan (build-asan/)"
	@echo "  make check-tsan   the same under TSan (build-tsan/)"
	@echo "  make check-faults the fault and abuse suite alone"
	@echo "  make torture      the stress workload 90 s a variant and the demo 100 times (plain, ASan, TSan)"
	@echo "  make bench        benchmark table (test drivers, this machine)"
	@echo "  make fuzz         libFuzzer: decoder, manifest reader, broker requests (FUZZ_SECONDS=60 each)"
	@echo "  make deps         install the Debian packages the targets need"
	@echo "  make install      library, ipcbyval-run, man pages, docs, modulefile (PREFIX=$(PREFIX) DESTDIR=)"
	@echo "  make uninstall    remove what make install put there (same PREFIX)"
	@echo "  make deb          build/ipcbyval_$(VERSION)_$(DEB_ARCH).deb (dpkg-deb; install with apt-get install ./FILE)"
	@echo "  make rpm          build/ipcbyval-$(VERSION)-1.$(RPM_ARCH).rpm, the same files for RHEL (rpmbuild)"
	@echo "  make clean        remove the build trees"
	@echo "On a GPU machine (CUDA, Open MPI, no package registry):"
	@echo "  make gpu-deps     run on Debian first: copy the Level Zero headers to .gpu-deps/"
	@echo "  make check-gpu    routing, MPI and latency tests against the real CUDA driver"
	@echo "  make bench-gpu    GPU benchmark table"

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
	$(call say,CC,$<)$(CC) $(LIB_CFLAGS) -MMD -MP -c -o $@ $<

# The export map: the interposed symbols of shim/symbols.h.
$(BUILD)/ipcbyval.map: shim/symbols.h $(FLAGS_STAMP)
	$(call say,GEN,$@)$(CC) $(LIB_CFLAGS) -DBYVAL_EXPORT_MAP -E -P -x c -o $@ shim/symbols.h

$(LIB): $(LIB_OBJ) $(BUILD)/ipcbyval.map
	$(call say,LD,$@)$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=$(BUILD)/ipcbyval.map \
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

# The long runs of the stress workload and of the quiet demo, in the
# plain build and under each sanitizer (minutes: not part of make check).
TORTURE_ENV := STRESS_SECONDS=90 DEMO_RUNS=100
torture: deps
	@$(MAKE) --no-print-directory tests
	@$(TORTURE_ENV) BUILD=$(BUILD) scripts/run-checks.sh -- $(TORTURE_TESTS)
	@$(MAKE) --no-print-directory SAN=asan OPT=-O1 tests
	@$(TORTURE_ENV) BUILD=build-asan SAN=asan scripts/run-checks.sh -- $(TORTURE_TESTS)
	@$(MAKE) --no-print-directory SAN=tsan OPT=-O1 tests
	@$(TORTURE_ENV) BUILD=build-tsan SAN=tsan scripts/run-checks.sh -- $(TORTURE_TESTS)

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

# What the demo runs: the library, the Level Zero test driver and the
# MPI program (README: running the demo by hand).
demo-bins: lib $(ZEDRV_LIB) $(BUILD)/test/mpi/ze_mpi_exchange_ompi

demo-run: demo-bins
	@scripts/demo.sh

# On a GPU machine (no package registry there): build and run every GPU
# test, print a summary table. GPU_DEPS=dir supplies the Level Zero
# headers copied from a Debian machine (make gpu-deps).
check-gpu:
	@EXTRA_INC="$(if $(wildcard .gpu-deps/include),-I$(abspath .gpu-deps/include))" scripts/check-gpu.sh

bench-gpu:
	@EXTRA_INC="$(if $(wildcard .gpu-deps/include),-I$(abspath .gpu-deps/include))" scripts/bench-gpu.sh

# BASELINE=<git rev> also carries that revision's tree, which bench-gpu
# builds and times beside this one (before/after in one run).
gpu-deps:
	@mkdir -p .gpu-deps/include
	cp -r /usr/include/level_zero .gpu-deps/include/
	@if [ -n "$(BASELINE)" ]; then rm -rf .gpu-deps/baseline && mkdir -p .gpu-deps/baseline && \
	    git archive "$(BASELINE)" | tar -x -C .gpu-deps/baseline && echo "baseline $(BASELINE) in .gpu-deps/baseline"; fi

# ipcbyval-run and the modulefile learn where the library is installed;
# the modulefile puts BINDIR on PATH unless it is /usr/bin (there already).
SUBST = sed -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@VERSION@|$(VERSION)|g'
SUBST_MODULE = $(SUBST) $(if $(filter /usr/bin,$(BINDIR)),-e '/^@PATH@$$/d',-e 's|^@PATH@$$|prepend-path PATH $(BINDIR)|')
MODULEFILE := $(MODULEDIR)/ipcbyval/$(VERSION)

install: lib
	$(call say,INSTALL,$(DESTDIR)$(PREFIX))$(INSTALL) -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(BINDIR) \
	    $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man7 $(DESTDIR)$(DOCDIR) $(DESTDIR)$(MODULEDIR)/ipcbyval
	$(INSTALL) -m 0644 $(LIB) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libipcbyval.so
	$(SUBST) scripts/ipcbyval-run > $(DESTDIR)$(BINDIR)/ipcbyval-run
	chmod 0755 $(DESTDIR)$(BINDIR)/ipcbyval-run
	$(INSTALL) -m 0644 man/ipcbyval-run.1 $(DESTDIR)$(MANDIR)/man1/
	$(INSTALL) -m 0644 man/ipcbyval.7 $(DESTDIR)$(MANDIR)/man7/
	$(INSTALL) -m 0644 README.md $(DESTDIR)$(DOCDIR)/
	$(SUBST_MODULE) scripts/ipcbyval.modulefile > $(DESTDIR)$(MODULEFILE)
	chmod 0644 $(DESTDIR)$(MODULEFILE)

uninstall:
	$(call say,RM,$(DESTDIR)$(PREFIX))rm -f $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libipcbyval.so \
	      $(DESTDIR)$(BINDIR)/ipcbyval-run $(DESTDIR)$(MANDIR)/man1/ipcbyval-run.1 \
	      $(DESTDIR)$(MANDIR)/man7/ipcbyval.7 $(DESTDIR)$(DOCDIR)/README.md $(DESTDIR)$(MODULEFILE)
	rmdir $(DESTDIR)$(DOCDIR) $(DESTDIR)$(MODULEDIR)/ipcbyval 2>/dev/null || true

# The Debian package: make install into a staging tree under /usr (the
# library in the multiarch folder, lib/x86_64-linux-gnu), then dpkg-deb
# (scripts/mkdeb.sh). Evaluated only when used.
DEB_ARCH  = $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
MULTIARCH = $(shell $(CC) -print-multiarch 2>/dev/null || dpkg-architecture -qDEB_HOST_MULTIARCH)
DEB       = $(BUILD)/ipcbyval_$(VERSION)_$(DEB_ARCH).deb

deb: lib
	$(call say,DEB,$(DEB))BUILD=$(BUILD) VERSION=$(VERSION) DEB_ARCH=$(DEB_ARCH) MULTIARCH=$(MULTIARCH) \
	    MAKE="$(MAKE)" scripts/mkdeb.sh $(DEB)

# The RPM (RHEL-family sites): scripts/ipcbyval.spec runs make install
# into rpmbuild's tree; on Debian, rpmbuild comes from the rpm package.
# rpm's %{_arch} is the machine's (uname -m): rpm itself is not run here, as
# it deadlocks at start under the ASan runtime preloaded by make check-asan.
RPM_ARCH = $(shell uname -m)
RPM      = $(BUILD)/ipcbyval-$(VERSION)-1.$(RPM_ARCH).rpm

rpm: lib
	@command -v rpmbuild >/dev/null || { echo "make rpm: rpmbuild not found (Debian: apt-get install rpm; scripts/deps.sh)" >&2; exit 1; }
	$(call say,RPM,$(RPM))rm -rf $(BUILD)/rpm && rpmbuild -bb --quiet \
	    --define "_topdir $(abspath $(BUILD))/rpm" --define "srcdir $(CURDIR)" \
	    --define "build_tree $(abspath $(BUILD))" --define "ipcbyval_version $(VERSION)" \
	    scripts/ipcbyval.spec && cp $(BUILD)/rpm/RPMS/$(RPM_ARCH)/$(notdir $(RPM)) $(RPM)
	@echo "  built $(RPM):"; rpm -qlp $(RPM) 2>/dev/null | sed 's/^/    /'

clean:
	rm -rf build build-asan build-tsan build-fuzz $(CLEAN_EXTRA)

-include $(LIB_OBJ:.o=.d)
