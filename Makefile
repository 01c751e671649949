# jizhi - top-level Makefile.
#
#   make            build everything into $(BUILD) (default build/)
#   make run        install missing packages, build, run the example study
#   make test       install missing packages, build, run every test
#   make bench      benchmarks (each prints the peer's number and the ratio)
#   make SANITIZE=address,undefined test-unit   unit tests under ASan/UBSan
#   make valgrind   unit tests under valgrind
#
# Each part is one folder; its .c files are found by wildcard, so adding a
# file needs no change here. Part-specific rules live in <part>/<part>.mk.

CC       ?= cc
PYTHON   ?= /usr/bin/python3
OPT      ?= -O2
SANITIZE ?=
BUILD    ?= build

ifneq ($(SANITIZE),)
BUILD    := build-san
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif

PKGS      := libzmq jansson sqlite3 gsl libmicrohttpd libsodium
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
BLAS_INC  := $(firstword $(wildcard /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/aarch64-linux-gnu/openblas-pthread /usr/include/openblas))

WARN     := -Wall -Wextra -Wstrict-prototypes -Wno-unused-parameter -Wshadow
CFLAGS   ?= $(OPT) -g
ALL_CFLAGS := $(CFLAGS) -std=gnu11 -fPIC -pthread -MMD -MP $(WARN) $(SANFLAGS) $(PKG_CFLAGS) -I. -Itrial_helper
LDFLAGS  ?=
ALL_LDFLAGS := $(LDFLAGS) $(SANFLAGS) -pthread
# GSL's linear algebra runs on OpenBLAS: link -lopenblas, not -lgslcblas.
LIBS     := -lczmq -lzmq -lmicrohttpd -lsodium -ljansson -lsqlite3 -lgsl -lopenblas -lz -lm

# Optional parts: detected and reported, never required.
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
HAVE_CUDA := $(if $(NVCC),yes,no)
HAVE_NCCL := $(if $(wildcard /usr/include/nccl.h /usr/local/cuda/include/nccl.h),yes,no)
HAVE_MPI  := $(if $(shell command -v mpicc 2>/dev/null),yes,no)

# ---- sources by part -------------------------------------------------------
COMMON_SRC := $(wildcard common/*.c)
STORE_SRC  := $(wildcard store/*.c)
SCHED_SRC  := $(wildcard schedulers/*.c)
CTL_SRC    := $(wildcard controller/*.c)
DISP_SRC   := $(wildcard dispatcher/*.c)
HELPER_SRC := $(wildcard trial_helper/*.c)
CLI_SRC    := $(wildcard cli/*.c)
WEB_SRC    := $(wildcard web/*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

LIB_COMMON := $(BUILD)/lib/libjzcommon.a
LIB_STORE  := $(BUILD)/lib/libjzstore.a
LIB_SCHED  := $(BUILD)/lib/libjzsched.a
LIB_CTL    := $(BUILD)/lib/libjzctl.a
LIB_DISP   := $(BUILD)/lib/libjzdisp.a
LIB_WEB    := $(BUILD)/lib/libjzweb.a
LIBJIZHI_A := $(BUILD)/lib/libjizhi.a
LIBJIZHI_SO := $(BUILD)/lib/libjizhi.so
JIZHI      := $(BUILD)/bin/jizhi

# Internal libraries in link order (users before what they use).
INTERNAL_LIBS := $(LIB_WEB) $(LIB_CTL) $(LIB_DISP) $(LIB_STORE) $(LIB_SCHED) $(LIBJIZHI_A) $(LIB_COMMON)

UNIT_TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))

# Part makefiles add to these.
EXTRA_BINS  :=
EXTRA_TESTS :=
BENCHES     :=

.SECONDARY:
.PHONY: all run test test-unit test-integration bench deps config clean valgrind format fuzz
all: config $(JIZHI) $(LIBJIZHI_SO) $(BUILD)/lib/pkgconfig/jizhi.pc $(UNIT_TESTS)

-include trainer/trainer.mk
-include schedulers/schedulers.mk
-include web/web.mk

all: $(EXTRA_BINS)

config:
	@echo "jizhi build: CC=$(CC) BUILD=$(BUILD) SANITIZE=$(if $(SANITIZE),$(SANITIZE),no)"
	@echo "  CUDA (nvcc): $(HAVE_CUDA)   NCCL: $(HAVE_NCCL)   MPI: $(HAVE_MPI)"

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(LIB_COMMON): $(call obj,$(COMMON_SRC))
$(LIB_STORE):  $(call obj,$(STORE_SRC))
$(LIB_SCHED):  $(call obj,$(SCHED_SRC))
$(LIB_CTL):    $(call obj,$(CTL_SRC))
$(LIB_DISP):   $(call obj,$(DISP_SRC))
$(LIB_WEB):    $(call obj,$(WEB_SRC)) $(WEB_ASSETS_OBJ)
$(LIBJIZHI_A): $(call obj,$(HELPER_SRC))
$(BUILD)/lib/%.a:
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^

# The shared helper library carries the common code it uses and exports
# only jz_* (trial_helper/libjizhi.map).
$(LIBJIZHI_SO): $(call obj,$(HELPER_SRC)) $(LIB_COMMON) trial_helper/libjizhi.map
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $(call obj,$(HELPER_SRC)) $(LIB_COMMON) \
	    -Wl,--version-script=trial_helper/libjizhi.map -Wl,-soname,libjizhi.so $(ALL_LDFLAGS) -lzmq -ljansson -lm

$(BUILD)/lib/pkgconfig/jizhi.pc: trial_helper/jizhi.pc.in
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(abspath $(BUILD))|' -e 's|@INCLUDEDIR@|$(abspath trial_helper)|' $< > $@

$(JIZHI): $(call obj,$(CLI_SRC)) $(INTERNAL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(call obj,$(CLI_SRC)) $(INTERNAL_LIBS) $(ALL_LDFLAGS) $(LIBS) -lncursesw

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(INTERNAL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(INTERNAL_LIBS) $(ALL_LDFLAGS) $(LIBS)

# Benchmark drivers (bench/*.c), built by `make bench` only.
BENCH_PROGS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(wildcard bench/*.c))
$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIBJIZHI_A) $(LIB_COMMON)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LIBJIZHI_A) $(LIB_COMMON) $(ALL_LDFLAGS) $(LIBS)

# Fuzz targets (tests/fuzz/*.c, libFuzzer): `make fuzz` builds them with
# clang and runs each for FUZZ_SECONDS. Not part of `make test`.
FUZZ_SECONDS ?= 30
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,build-fuzz/%,$(wildcard tests/fuzz/*.c))
FUZZ_SRC := $(COMMON_SRC) $(HELPER_SRC) $(filter-out trainer/main.c,$(wildcard trainer/*.c))
build-fuzz/%: tests/fuzz/%.c $(FUZZ_SRC)
	@mkdir -p $(dir $@)
	clang -g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined -I. -Itrial_helper -I$(BLAS_INC) \
	    $(PKG_CFLAGS) $< $(FUZZ_SRC) -o $@ $(LIBS) -pthread

fuzz: $(FUZZ_TARGETS)
	@for t in $(FUZZ_TARGETS); do echo "== $$t"; mkdir -p $$t.corpus; \
	    $$t -max_total_time=$(FUZZ_SECONDS) -max_len=4096 $$t.corpus tests/data/specs/valid 2>&1 | tail -3 || exit 1; done

# ---- top-level commands ----------------------------------------------------
deps:
	@scripts/install-deps.sh

run: deps
	@$(MAKE) --no-print-directory all
	@scripts/run-example.sh

test: deps
	@$(MAKE) --no-print-directory all
	@if [ "$(HAVE_CUDA)" = yes ]; then $(MAKE) --no-print-directory cuda; \
	 else echo "CUDA backend: not built (no nvcc)"; fi
	@$(MAKE) --no-print-directory SANITIZE=address,undefined $(patsubst $(BUILD)/%,build-san/%,$(UNIT_TESTS))
	@PYTHON=$(PYTHON) BUILD=$(BUILD) tests/run-all.sh

test-unit: all
	@BUILD=$(BUILD) tests/run-all.sh --unit-only

valgrind: all
	@for t in $(UNIT_TESTS); do valgrind -q --error-exitcode=3 --leak-check=full --child-silent-after-fork=yes $$t || exit 1; done

bench: deps
	@$(MAKE) --no-print-directory all $(BENCH_PROGS) $(BENCHES)
	@PYTHON=$(PYTHON) BUILD=$(BUILD) scripts/bench-all.sh

# Live-change latency: scripted trials, trial set through the controller (bench/intervene.sh).
.PHONY: bench-intervene
bench-intervene: all $(BUILD)/bench/intervene_trial $(BUILD)/bench/intervene_driver
	@PYTHON=$(PYTHON) BUILD=$(BUILD) bench/intervene.sh

# Schedulers acting on running trials against their baselines (bench/schedulers.sh
# runs each bench/schedulers_<part>.* in turn). BENCH_SCHED_ARGS="--quick" for a short run.
.PHONY: bench-schedulers
bench-schedulers: all
	@PYTHON=$(PYTHON) BUILD=$(BUILD) bench/schedulers.sh $(BENCH_SCHED_ARGS)

format:
	clang-format -i $(shell git ls-files '*.c' '*.h')

clean:
	rm -rf build build-san build-fuzz

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
