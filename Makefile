# locus: top-level build.
#
# Each folder's fragment (`<folder>/*.mk`) declares that folder's libraries,
# programs and tests, and nothing of another folder's, with the helpers
# below. A library names the locus libraries it uses directly, once; a
# program names what it uses and links the closure, in dependency order.
#
#   make            build everything (-O2 -g, -Wall -Wextra -Werror, gnu11)
#   make test       install what the tests need, build, run every test
#   make check      unit and host tests: no VM, no fuzzing (the inner loop)
#   make test-unit  the cmocka unit tests only
#   make asan       the unit tests under AddressSanitizer + UBSan
#   make fuzz       every libFuzzer target for FUZZ_SECONDS each (tests/fuzz/fuzz.mk)
#   make bench      the benchmarks; writes tools/bench/results/<date>.txt
#   make demo       the main job: locusd on the embedded default with client traffic
#   make install    PREFIX=/usr/local DESTDIR= (deploy/deploy.mk lists the rest)
#   make deps       install every Debian 12 package any target needs
#
# One test by hand: `make build/tests/test_ring && build/tests/test_ring`.

BUILD      ?= build
PREFIX     ?= /usr/local
DESTDIR    ?=
CC         ?= cc
AR         ?= ar
PKG_CONFIG ?= pkg-config

# `make SAN=1 ...` builds into a separate tree with sanitizers.
ifeq ($(SAN),1)
BUILD      := build-asan
SANFLAGS   := -fsanitize=address,undefined -fno-omit-frame-pointer \
              -fno-sanitize-recover=all
OPT        ?= -O1
endif
# `make FUZZ=1 ...` builds the libFuzzer targets into their own tree with
# clang (tests/fuzz/fuzz.mk): every object gets the fuzzer's coverage, ASan and
# UBSan, and undefined behaviour aborts like a crash.
ifeq ($(FUZZ),1)
BUILD      := build-fuzz
CC         := clang
SANFLAGS   := -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer \
              -fno-sanitize-recover=all
OPT        ?= -O1
endif
OPT        ?= -O2

CPPFLAGS   += -D_GNU_SOURCE
# Header search path of an object: the modules' public headers, plus what
# its folder's fragment adds for its own objects. control/ and shm/ narrow
# it (the layering rule: tests/test_layering.sh).
INCLUDES    = -Ishm -Idataplane -Icontrol -Iverbs
CFLAGS     += -std=gnu11 $(OPT) -g -Wall -Wextra -Werror -fno-common \
              -MMD -MP $(SANFLAGS)
LDFLAGS    += $(SANFLAGS)
LDLIBS     += -lm -lpthread

# pkg-config look-ups run on first use, never at parse time of a rule that
# is not built: `make test` installs packages before it recurses.
pkg_cflags = $(shell $(PKG_CONFIG) --cflags $(1) 2>/dev/null)
pkg_libs   = $(shell $(PKG_CONFIG) --libs $(1) 2>/dev/null)

# The long-running and allocation-heavy programs (locusd, locusctl) use
# jemalloc; sanitizer builds keep the sanitizer's allocator.
JEMALLOC   := $(if $(SANFLAGS),,jemalloc)

LIBS_DIR   := $(BUILD)/lib
BIN_DIR    := $(BUILD)/bin

ALL_OBJS      :=
ALL_TARGETS   :=
LIBRARIES     :=
PROGRAMS      :=
BINS          :=
UNIT_TESTS    :=
HOST_TESTS    :=
VM_TESTS      :=
FUZZ_TESTS    :=
BENCHES       :=
BENCH_SCRIPTS :=
INSTALL_EXTRA :=
MANPAGES      :=

.PHONY: all
all: all-targets

objs_of = $(patsubst %.c,$(BUILD)/%.o,$(1))

# List helpers: the closure of libraries in link order. A library comes
# before every library it uses: of each name's occurrences in the
# depth-first walk, the last one is kept.
reverse    = $(if $(1),$(call reverse,$(wordlist 2,$(words $(1)),$(1))) $(firstword $(1)))
uniq_first = $(if $(1),$(firstword $(1)) $(call uniq_first,$(filter-out $(firstword $(1)),$(1))))
uniq_last  = $(call reverse,$(call uniq_first,$(call reverse,$(1))))
lib_walk   = $(foreach l,$(1),$(l) $(call lib_walk,$(LIB_DEPS_$(l))))
lib_closure = $(strip $(call uniq_last,$(call lib_walk,$(1))))
lib_pkgs   = $(call uniq_first,$(foreach l,$(call lib_closure,$(1)),$(LIB_PKGS_$(l))))

# $(call LIBRARY,name,sources,locus-libs-used,pkg-config-modules):
# $(LIBS_DIR)/liblocus_name.a. Its sources compile with the modules' flags;
# programs linking it link its libraries and modules too.
define LIBRARY
LIBRARIES += $(1)
LIB_DEPS_$(1) := $(3)
LIB_PKGS_$(1) := $(4)
$(LIBS_DIR)/liblocus_$(1).a: $(call objs_of,$(2))
	@mkdir -p $$(@D)
	@rm -f $$@
	$$(AR) rcs $$@ $$^
ALL_OBJS += $(call objs_of,$(2))
$(if $(strip $(4)),$(call objs_of,$(2)): PKG_CFLAGS += $$(call pkg_cflags,$(4)))
endef

# $(call PROGRAM,output-under-build,sources,locus-libs-used,pkg-config-modules)
# The rule is made once every fragment is read (PROGRAM_RULE below), so a
# program may use a library another folder declares later.
define PROGRAM
PROGRAMS += $(1)
PROG_SRCS_$(1) := $(2)
PROG_LIBS_$(1) := $(3)
PROG_PKGS_$(1) := $(4)
ALL_OBJS += $(call objs_of,$(2))
ALL_TARGETS += $(BUILD)/$(1)
endef

# $(call TEST,name,sources,locus-libs-used,pkg-config-modules): a cmocka
# unit test, $(BUILD)/tests/name, run by make test-unit.
define TEST
$(call PROGRAM,tests/$(1),$(2),$(3),cmocka $(4))
UNIT_TESTS += tests/$(1)
endef

# $(call USES_PKG,sources,pkg-config-modules): compile flags for those files
# only (DPDK's flags add -march and must not leak into other objects).
define USES_PKG
$(call objs_of,$(1)): PKG_CFLAGS += $$(call pkg_cflags,$(2))
endef

include $(wildcard shm/*.mk dataplane/*.mk control/*.mk verbs/*.mk \
                   tools/*/*.mk tests/*.mk tests/*/*.mk deploy/*.mk)

define PROGRAM_RULE
$(BUILD)/$(1): $(call objs_of,$(PROG_SRCS_$(1))) \
		$(foreach l,$(call lib_closure,$(PROG_LIBS_$(1))),$(LIBS_DIR)/liblocus_$(l).a)
	@mkdir -p $$(@D)
	$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $$(filter %.a,$$^) \
		$$(call pkg_libs,$(strip $(PROG_PKGS_$(1)) $(call lib_pkgs,$(PROG_LIBS_$(1))))) \
		$$(LDLIBS)
endef
$(foreach p,$(PROGRAMS),$(eval $(call PROGRAM_RULE,$(p))))

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(INCLUDES) $(CFLAGS) $(PKG_CFLAGS) -c -o $@ $<

-include $(ALL_OBJS:.o=.d)

.PHONY: all-targets
all-targets: $(ALL_TARGETS)

# The targets below build on every core first (the tests themselves run one
# at a time).
NPROC := $(shell nproc 2>/dev/null || echo 1)

# `make deps` installs every package of every target; each target below
# installs what it needs first (tools/dev/deps.sh), then recurses so that
# pkg-config sees what was just installed.
.PHONY: deps
deps:
	tools/dev/deps.sh install all

.PHONY: test test-build check-build test-run
test:
	tools/dev/deps.sh ensure test
	$(MAKE) --no-print-directory -j$(NPROC) test-build
	$(MAKE) --no-print-directory test-run

test-build check-build: $(addprefix $(BUILD)/,$(UNIT_TESTS)) $(ALL_TARGETS)

test-run: $(addprefix $(BUILD)/,$(UNIT_TESTS)) $(ALL_TARGETS)
	tests/run-tests.sh $(addprefix $(BUILD)/,$(UNIT_TESTS)) $(HOST_TESTS) $(FUZZ_TESTS) \
		$(VM_TESTS)

.PHONY: check check-run
check:
	tools/dev/deps.sh ensure check
	$(MAKE) --no-print-directory -j$(NPROC) check-build
	$(MAKE) --no-print-directory check-run

check-run: $(addprefix $(BUILD)/,$(UNIT_TESTS)) $(ALL_TARGETS)
	tests/run-tests.sh $(addprefix $(BUILD)/,$(UNIT_TESTS)) $(HOST_TESTS)

.PHONY: test-unit
test-unit: $(addprefix $(BUILD)/,$(UNIT_TESTS))
	tests/run-tests.sh $(addprefix $(BUILD)/,$(UNIT_TESTS))

.PHONY: asan
asan:
	tools/dev/deps.sh ensure build
	$(MAKE) --no-print-directory SAN=1 test-unit

# The main job on the embedded default: locusd, tables fitted from the
# repository's calibration sample, client traffic, a table pushed mid-run,
# locus-stat.
.PHONY: demo
demo:
	tools/dev/deps.sh ensure demo
	$(MAKE) --no-print-directory -j$(NPROC) $(BUILD)/bin/locusd $(BUILD)/bin/locusctl \
		$(BUILD)/bin/locus-loadgen $(BUILD)/bin/locus-stat $(BUILD)/tools/bench/bench_dataplane
	BUILD=$(BUILD) tools/demo/demo.sh

.PHONY: bench bench-run
bench:
	tools/dev/deps.sh ensure bench
	$(MAKE) --no-print-directory -j$(NPROC) check-build $(addprefix $(BUILD)/,$(BENCHES))
	$(MAKE) --no-print-directory bench-run

bench-run: $(addprefix $(BUILD)/,$(BENCHES)) $(ALL_TARGETS)
	BUILD=$(BUILD) tools/bench/run.sh $(addprefix $(BUILD)/,$(BENCHES)) $(BENCH_SCRIPTS)

.PHONY: install install-bins install-man
install: install-bins install-man $(INSTALL_EXTRA)

install-bins: all-targets
	install -d $(DESTDIR)$(PREFIX)/bin
	$(if $(BINS),install -m 0755 $(addprefix $(BUILD)/,$(BINS)) $(DESTDIR)$(PREFIX)/bin/)

# Each fragment lists its man pages in MANPAGES; a page's suffix is its section.
MANDIR ?= $(PREFIX)/share/man
install-man:
	$(foreach m,$(MANPAGES),install -d $(DESTDIR)$(MANDIR)/man$(subst .,,$(suffix $(m))) && \
		install -m 0644 $(m) $(DESTDIR)$(MANDIR)/man$(subst .,,$(suffix $(m)))/ &&) true

.PHONY: clean
clean:
	rm -rf build build-asan build-fuzz
