# locus — top-level build.
#
# Each directory contributes a fragment (`*/module.mk`, `*/<part>.mk`) that
# declares libraries, programs, tests and benchmarks with the helpers below.
# Every module builds into its own static library so a half-written module
# never breaks the build of another one's targets.
#
#   make            build everything (-O2 -g, -Wall -Wextra -Werror, gnu11)
#   make test       install missing Debian packages, build, run every test
#   make asan       the unit tests under AddressSanitizer + UBSan
#   make fuzz       every libFuzzer target for FUZZ_SECONDS each (tests/fuzz.mk)
#   make bench      build and run the benchmarks (figures are printed, never asserted)
#   make demo       the main job: locusd on the embedded default with client traffic
#   make install    PREFIX=/usr/local DESTDIR=
#   make deps       install the Debian 12 packages the build and tests need

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
# clang (tests/fuzz.mk): every object gets the fuzzer's coverage, ASan and
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
# Header search path of an object: every module's, unless the directory's
# fragment narrows it for its own objects (control/ and shm/ never see
# dataplane/: the formats both planes share live in shm/).
INCLUDES    = -Ishm -Idataplane -Icontrol -Iverbs -Itools
CFLAGS     += -std=gnu11 $(OPT) -g -Wall -Wextra -Werror -fno-common \
              -MMD -MP $(SANFLAGS)
LDFLAGS    += $(SANFLAGS)
LDLIBS     += -lm -lpthread

# pkg-config look-ups run once, on first use, and never at parse time of a
# rule that is not built: `make test` installs packages before it recurses.
pkg_cflags = $(shell $(PKG_CONFIG) --cflags $(1) 2>/dev/null)
pkg_libs   = $(shell $(PKG_CONFIG) --libs $(1) 2>/dev/null)

# The long-running and allocation-heavy programs (locusd, locusctl) use jemalloc;
# sanitizer builds keep the sanitizer's allocator.
JEMALLOC   := $(if $(SANFLAGS),,jemalloc)

LIBS_DIR   := $(BUILD)/lib
BIN_DIR    := $(BUILD)/bin

ALL_OBJS    :=
ALL_TARGETS :=
BINS        :=
UNIT_TESTS  :=
BENCHES     :=
EXTRA_TESTS :=
BENCH_SCRIPTS :=
INSTALL_EXTRA :=

.PHONY: all
all: all-targets

# $(call LIBRARY,name,sources): $(LIBS_DIR)/liblocus_name.a
define LIBRARY
$(LIBS_DIR)/liblocus_$(1).a: $(patsubst %.c,$(BUILD)/%.o,$(2))
	@mkdir -p $$(@D)
	@rm -f $$@
	$$(AR) rcs $$@ $$^
ALL_OBJS += $(patsubst %.c,$(BUILD)/%.o,$(2))
endef

# $(call PROGRAM,output-under-build,sources,locus-libs,pkg-config-modules)
# Libraries are linked in the order given: dependants first.
define PROGRAM
$(BUILD)/$(1): $(patsubst %.c,$(BUILD)/%.o,$(2)) $(foreach l,$(3),$(LIBS_DIR)/liblocus_$(l).a)
	@mkdir -p $$(@D)
	$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $$(filter %.a,$$^) \
		$$(call pkg_libs,$(4)) $$(LDLIBS)
ALL_OBJS += $(patsubst %.c,$(BUILD)/%.o,$(2))
ALL_TARGETS += $(BUILD)/$(1)
endef

# $(call USES_PKG,sources,pkg-config-modules): compile flags for those files
# only (DPDK's flags add -march and must not leak into other objects).
define USES_PKG
$(patsubst %.c,$(BUILD)/%.o,$(1)): PKG_CFLAGS += $$(call pkg_cflags,$(2))
endef

include $(sort $(wildcard shm/*.mk dataplane/*.mk control/*.mk verbs/*.mk \
                          tools/*.mk tools/rxe-vm/*.mk tools/python/*.mk tests/*.mk \
                          deploy/*.mk))

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(INCLUDES) $(CFLAGS) $(PKG_CFLAGS) -c -o $@ $<

-include $(ALL_OBJS:.o=.d)

.PHONY: all-targets
all-targets: $(ALL_TARGETS)

.PHONY: deps
deps:
	tools/deps.sh install

# `make test` is the one command a user and CI run: it installs what is
# missing, then builds and runs everything in a fresh make (so pkg-config
# sees the packages it just installed).
.PHONY: test
test:
	tools/deps.sh ensure
	$(MAKE) --no-print-directory test-run

.PHONY: test-run
test-run: $(addprefix $(BUILD)/,$(UNIT_TESTS)) $(ALL_TARGETS)
	tools/run-tests.sh $(addprefix $(BUILD)/,$(UNIT_TESTS)) $(EXTRA_TESTS)

# The main job on the embedded default: locusd, tables fitted from the repo's
# calibration sample, client traffic, a table pushed mid-run, locus-stat.
.PHONY: demo
demo:
	tools/deps.sh ensure
	$(MAKE) --no-print-directory all-targets
	BUILD=$(BUILD) tools/demo.sh

.PHONY: test-unit
test-unit: $(addprefix $(BUILD)/,$(UNIT_TESTS))
	tools/run-tests.sh $(addprefix $(BUILD)/,$(UNIT_TESTS))

.PHONY: asan
asan:
	tools/deps.sh ensure
	$(MAKE) --no-print-directory SAN=1 test-unit

.PHONY: bench
bench:
	tools/deps.sh ensure
	$(MAKE) --no-print-directory bench-run

.PHONY: bench-run
bench-run: $(addprefix $(BUILD)/,$(BENCHES)) $(ALL_TARGETS)
	@set -e; for b in $(addprefix $(BUILD)/,$(BENCHES)); do \
		echo "== $$b"; $$b; done; \
	for s in $(BENCH_SCRIPTS); do echo "== $$s"; BUILD=$(BUILD) $$s; done

.PHONY: install install-bins
install: install-bins $(INSTALL_EXTRA)

install-bins: all-targets
	install -d $(DESTDIR)$(PREFIX)/bin
	$(if $(BINS),install -m 0755 $(addprefix $(BUILD)/,$(BINS)) $(DESTDIR)$(PREFIX)/bin/)

.PHONY: clean
clean:
	rm -rf build build-asan build-fuzz
