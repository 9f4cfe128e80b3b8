# libFuzzer targets (tests/fuzz/README.md): one per parser of untrusted
# bytes, each through the entry point locusd and the tools use.
#
#   make fuzz             every target for FUZZ_SECONDS (default 60) each,
#                         one at a time; prints executions, exec/s, cov, ft
#   make fuzz FUZZ_TARGETS="config trace"   some of them
#   make fuzz-seeds       regenerate the checked-in seed corpora
#
# The targets build with clang into build-fuzz/ (make FUZZ=1, see Makefile);
# `make test` builds them too and runs tests/fuzz/smoke.sh: every seed and
# every regression input, then a few seconds of fuzzing per target.

FUZZ_ALL := tblfile eldr_table grace_table graceset eldr_sig blocks_req dispatch_req combine_req \
	rows_msg engine_client peer_msg load_row regions config json trace esft eplb counters \
	table_region segment verbs_proto node_sockets

# per target: the libraries it uses, extra sources, pkg-config modules
FUZZ_LIBS_tblfile      := formats
FUZZ_LIBS_eldr_table   := eldr_router
FUZZ_SRCS_eldr_table   := tests/fuzz/fuzz_tables.c tests/fuzz/fuzz_eldr_common.c
FUZZ_LIBS_grace_table  := grace_plan
FUZZ_SRCS_grace_table  := tests/fuzz/fuzz_tables.c tests/fuzz/fuzz_plan.c
FUZZ_LIBS_graceset     := grace_plan
FUZZ_SRCS_graceset     := tests/fuzz/fuzz_tables.c tests/fuzz/fuzz_plan.c
FUZZ_LIBS_eldr_sig     := eldr_router
FUZZ_SRCS_eldr_sig     := tests/fuzz/fuzz_tables.c tests/fuzz/fuzz_eldr_common.c
FUZZ_LIBS_blocks_req   := formats
FUZZ_LIBS_dispatch_req := wire grace_plan
FUZZ_SRCS_dispatch_req := tests/fuzz/fuzz_tables.c tests/fuzz/fuzz_plan.c
FUZZ_LIBS_combine_req  := wire
FUZZ_LIBS_rows_msg     := wire
FUZZ_ENGINE_LIBS       := engine client
FUZZ_ENGINE_SRCS       := tests/fuzz/fuzz_engine.c tests/fuzz/fuzz_engine_ops.c \
	tests/fuzz/fuzz_tables.c
FUZZ_LIBS_engine_client := $(FUZZ_ENGINE_LIBS)
FUZZ_SRCS_engine_client := $(FUZZ_ENGINE_SRCS)
FUZZ_LIBS_peer_msg     := $(FUZZ_ENGINE_LIBS)
FUZZ_SRCS_peer_msg     := $(FUZZ_ENGINE_SRCS)
FUZZ_LIBS_load_row     := $(FUZZ_ENGINE_LIBS)
FUZZ_SRCS_load_row     := $(FUZZ_ENGINE_SRCS)
FUZZ_LIBS_regions      := node
FUZZ_SRCS_regions      := $(FUZZ_ENGINE_SRCS) tests/fuzz/fuzz_sock.c
FUZZ_LIBS_node_sockets := node config
FUZZ_SRCS_node_sockets := tests/fuzz/fuzz_tables.c tests/fuzz/fuzz_sock.c
FUZZ_LIBS_table_region := formats shm
FUZZ_SRCS_table_region := tests/fuzz/fuzz_tables.c
FUZZ_LIBS_segment      := client counters shm
FUZZ_LIBS_verbs_proto  := verbs_core
FUZZ_LIBS_config       := config
FUZZ_LIBS_json         := trace
FUZZ_SRCS_json         := tests/mini_json.c
FUZZ_LIBS_trace        := trace
FUZZ_SRCS_trace        := tests/fuzz/fuzz_trace_common.c
FUZZ_LIBS_esft         := trace
FUZZ_SRCS_esft         := tests/fuzz/fuzz_trace_common.c
FUZZ_LIBS_eplb         := gracefit trace
FUZZ_LIBS_counters     := statfmt trace

FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= $(FUZZ_ALL)
FUZZ_UTIL    :=

ifeq ($(FUZZ),1)
$(foreach t,$(FUZZ_ALL),$(eval $(call PROGRAM,tests/fuzz/fuzz_$(t),tests/fuzz/fuzz_$(t).c \
	$(FUZZ_SRCS_$(t)),$(FUZZ_LIBS_$(t)),$(FUZZ_PKGS_$(t)))))
$(addprefix $(BUILD)/tests/fuzz/fuzz_,$(FUZZ_ALL)): LDFLAGS += -fsanitize=fuzzer

.PHONY: fuzz-bins fuzz-run
fuzz-bins: $(addprefix $(BUILD)/tests/fuzz/fuzz_,$(FUZZ_ALL))

fuzz-run: fuzz-bins
	FUZZ_BUILD=$(BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run.sh $(FUZZ_TARGETS)
else
.PHONY: fuzz fuzz-build
fuzz:
	tools/dev/deps.sh ensure fuzz
	$(MAKE) --no-print-directory FUZZ=1 fuzz-run

# The smoke in `make test` needs the clang tree built first.
fuzz-build:
	+$(MAKE) --no-print-directory FUZZ=1 fuzz-bins
test-build test-run: fuzz-build
FUZZ_TESTS += tests/fuzz/smoke.sh
endif

# The seed generator builds with the normal tree (gcc) and writes the
# checked-in corpora; run it after a format changes.
FUZZ_GEN_LIBS := engine client gracefit trace verbs_core
$(eval $(call PROGRAM,tests/fuzz/gen_seeds,tests/fuzz/gen_seeds.c tests/fuzz/gen_seeds_sys.c \
	tests/fuzz/gen_seeds_sets.c \
	tests/fuzz/fuzz_tables.c \
	tests/fuzz/fuzz_engine.c tests/fuzz/fuzz_engine_ops.c,$(FUZZ_GEN_LIBS)))

.PHONY: fuzz-seeds
fuzz-seeds: $(BUILD)/tests/fuzz/gen_seeds
	rm -rf tests/fuzz/corpus
	$(BUILD)/tests/fuzz/gen_seeds tests/fuzz/corpus .
