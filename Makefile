# jizhi - top-level Makefile.
#
#   make            build everything into $(BUILD) (default build/)
#   make run        install missing packages, build, run the example study
#   make test       install missing packages, build, run every test
#   make bench      benchmarks (each prints the peer's number and the ratio)
#   make SANITIZE=address,undefined test-unit   unit tests under ASan/UBSan
#   make SANITIZE=thread tsan-tests   the threaded unit tests under TSan (build-tsan/)
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
override BUILD := $(if $(filter thread,$(SANITIZE)),build-tsan,build-san)
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
LIBS     := -lzmq -lsodium -ljansson -lsqlite3 -lgsl -lopenblas -lz -lm

# Optional parts: detected and reported, never required.
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
HAVE_CUDA := $(if $(NVCC),yes,no)
HAVE_NCCL := $(if $(wildcard /usr/include/nccl.h /usr/local/cuda/include/nccl.h),yes,no)
HAVE_MPI  := $(if $(shell command -v mpicc 2>/dev/null),yes,no)
# oneDNN (libdnnl-dev) for jizhi-train's CPU convolutions; DNNL=no builds
# the im2col + GEMM fallback alone.
DNNL     ?= $(if $(wildcard /usr/include/oneapi/dnnl/dnnl.h),yes,no)
HAVE_DNNL := $(DNNL)

# ---- sources by part -------------------------------------------------------
COMMON_SRC := $(wildcard common/*.c)
# The common code the static helper library carries: not the front ends'
# identities and controller client (they need libsodium, which a trial
# program linking libjizhi.a should not have to know about; zmtp.c is the
# client's ipc:// path).
HELPER_COMMON_SRC := $(filter-out common/ident.c common/client.c common/client_zmq.c common/zmtp.c common/authkeys.c,$(COMMON_SRC))
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
LIB_HELPER := $(BUILD)/lib/libjzhelper.a
LIBJIZHI_A := $(BUILD)/lib/libjizhi.a
# The helper library's version lives in trial_helper/jizhi.h (JZ_VERSION);
# its soname carries the major number.
VERSION    := $(shell sed -n 's/^\#define JZ_VERSION "\(.*\)"/\1/p' trial_helper/jizhi.h)
SOMAJOR    := $(firstword $(subst ., ,$(VERSION)))
LIBJIZHI_SO := $(BUILD)/lib/libjizhi.so
LIBJIZHI_SOV := $(BUILD)/lib/libjizhi.so.$(SOMAJOR)
JIZHI      := $(BUILD)/bin/jizhi
JIZHI_CORE := $(BUILD)/bin/jizhi-core
# The `jizhi` front (cli/main.c with CLI_FRONT): the trial and report
# commands in-process, the others by execv of jizhi-core beside it. Its
# objects and libraries leave out the schedulers, GSL, OpenBLAS and curses,
# and libzmq: ipc:// through common/zmtp.c, tcp:// by jizhi-core (main.c
# defines client__zmq_call, so common/client_zmq.o is not linked), and
# `report` loads libjizhi at run time (dlopen).
CLI_FRONT_SRC := cli/cmd_trial.c cli/cmd_ask.c cli/cli_util.c cli/cli_opts.c
FRONT_PKGS := jansson sqlite3 zlib
FRONT_LIBS := $(or $(shell pkg-config --libs $(FRONT_PKGS) 2>/dev/null),-ljansson -lsqlite3 -lz) -lm -ldl

# Internal libraries in link order (users before what they use).
INTERNAL_LIBS := $(LIB_WEB) $(LIB_CTL) $(LIB_DISP) $(LIB_STORE) $(LIB_SCHED) $(LIB_HELPER) $(LIB_COMMON)

UNIT_TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))
# The unit tests with threads of their own (the helper's I/O thread, the
# web server's, the controller loop beside a test thread, the BO worker):
# `make test` runs them again under ThreadSanitizer from build-tsan/
# (suppressions for the uninstrumented libzmq: tests/tsan.supp). The
# dispatcher forks rather than threads: test_disp stays out, to keep time.
TSAN_TESTS := test_jz_helper test_web test_wire test_ctl_auth test_ctl_chaos test_sched_bo

# Part makefiles add to these.
EXTRA_BINS  :=
EXTRA_TESTS :=
BENCHES     :=

.SECONDARY:
.PHONY: all run test test-unit test-integration bench deps config clean valgrind format fuzz \
        format-check fuzz-build \
        install uninstall
all: config $(JIZHI) $(JIZHI_CORE) $(LIBJIZHI_SO) $(LIBJIZHI_A) $(BUILD)/lib/pkgconfig/jizhi.pc $(UNIT_TESTS)

-include trainer/trainer.mk
-include schedulers/schedulers.mk
-include web/web.mk
-include tests/cudaemu/cudaemu.mk

all: $(EXTRA_BINS)

config:
	@echo "jizhi build: CC=$(CC) BUILD=$(BUILD) SANITIZE=$(if $(SANITIZE),$(SANITIZE),no)"
	@echo "  CUDA (nvcc): $(HAVE_CUDA)   NCCL: $(HAVE_NCCL)   MPI: $(HAVE_MPI)   oneDNN: $(HAVE_DNNL)   cuDNN: $(HAVE_CUDNN)"

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(LIB_COMMON): $(call obj,$(COMMON_SRC))
$(LIB_STORE):  $(call obj,$(STORE_SRC))
$(LIB_SCHED):  $(call obj,$(SCHED_SRC))
$(LIB_CTL):    $(call obj,$(CTL_SRC))
$(LIB_DISP):   $(call obj,$(DISP_SRC))
$(LIB_WEB):    $(call obj,$(WEB_SRC)) $(WEB_ASSETS_OBJ)
$(LIB_HELPER): $(call obj,$(HELPER_SRC))
$(BUILD)/lib/%.a:
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^

# The static helper library users link (libjizhi.a) is self-contained like
# the shared one: the helper and the common code it uses, linked into one
# object whose only global symbols are jz_*, so that a static link needs
# only -lzmq -ljansson -lm -pthread and clashes with no name of the user's.
# jizhi's own programs link the helper objects (libjzhelper.a) instead.
$(LIBJIZHI_A): $(call obj,$(HELPER_SRC)) $(call obj,$(HELPER_COMMON_SRC))
	@mkdir -p $(dir $@)
	@rm -f $@ $@.o
	$(CC) -r -nostdlib -o $@.o $^
	objcopy --wildcard --keep-global-symbol='jz_*' $@.o
	ar rcs $@ $@.o
	@rm -f $@.o

# The shared helper library carries the common code it uses and exports
# only jz_* (trial_helper/libjizhi.map).
$(LIBJIZHI_SOV): $(call obj,$(HELPER_SRC)) $(LIB_COMMON) trial_helper/libjizhi.map
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $(call obj,$(HELPER_SRC)) $(LIB_COMMON) \
	    -Wl,--version-script=trial_helper/libjizhi.map -Wl,-soname,libjizhi.so.$(SOMAJOR) $(ALL_LDFLAGS) -lzmq -ljansson -lm
$(LIBJIZHI_SO): $(LIBJIZHI_SOV)
	ln -sf $(notdir $<) $@

$(BUILD)/lib/pkgconfig/jizhi.pc: trial_helper/jizhi.pc.in
	@mkdir -p $(dir $@)
	sed -e 's|@LIBDIR@|$(abspath $(BUILD))/lib|' -e 's|@INCLUDEDIR@|$(abspath trial_helper)|' \
	    -e 's|@VERSION@|$(VERSION)|' $< > $@

$(BUILD)/obj/cli/main.o: ALL_CFLAGS += -DJIZHI_VERSION='"$(VERSION)"'
$(JIZHI_CORE): $(call obj,$(CLI_SRC)) $(INTERNAL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(call obj,$(CLI_SRC)) $(INTERNAL_LIBS) $(ALL_LDFLAGS) $(LIBS) -lncursesw

$(BUILD)/obj/cli/main_front.o: cli/main.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -DCLI_FRONT -DJIZHI_VERSION='"$(VERSION)"' \
	    -DJZ_SONAME='"libjizhi.so.$(SOMAJOR)"' -MF $(@:.o=.d) -c $< -o $@
$(JIZHI): $(BUILD)/obj/cli/main_front.o $(call obj,$(CLI_FRONT_SRC)) $(LIB_STORE) $(LIB_COMMON) | $(LIBJIZHI_SOV)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(ALL_LDFLAGS) -Wl,--as-needed $(FRONT_LIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(INTERNAL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(INTERNAL_LIBS) $(ALL_LDFLAGS) $(LIBS)

# test_oom injects allocation failures: our code's allocations go through
# its wrappers (jansson's through json_set_alloc_funcs); this binary only.
$(BUILD)/tests/test_oom: ALL_LDFLAGS += -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc \
    -Wl,--wrap=free,--wrap=strdup,--wrap=strndup,--wrap=json_loads,--wrap=json_loadb

# Benchmark drivers (bench/*.c), built by `make bench` only. Every benchmark
# lives under bench/: drivers, scripts and the peers' runners; the drivers
# that link the scheduler library (bench_bo, bench_mo) have their rules in
# schedulers/schedulers.mk.
BENCH_PROGS := $(patsubst bench/%.c,$(BUILD)/bench/%,\
                 $(filter-out bench/bench_bo.c bench/bench_mo.c bench/gemm_libs.c,$(wildcard bench/*.c)))
$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIB_HELPER) $(LIB_COMMON)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LIB_HELPER) $(LIB_COMMON) $(ALL_LDFLAGS) $(LIBS)

# Fuzz targets (tests/fuzz/*.c, libFuzzer), built with clang under
# ASan/UBSan. `make fuzz` runs each for FUZZ_SECONDS from its own seed
# corpus and fails when a target finds a crash (the input is left as
# build-fuzz/<target>-crash-*). `make test` runs each for a few seconds.
FUZZ_SECONDS ?= 30
FUZZ_NAMES   := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/*.c))
FUZZ_TARGETS := $(addprefix build-fuzz/,$(FUZZ_NAMES))
HAVE_CLANG   := $(if $(shell command -v clang 2>/dev/null),yes,no)
# What each target links and the seeds it starts from.
FUZZ_SRC_fuzz_spec   := $(COMMON_SRC)
FUZZ_SRC_fuzz_wire   := $(COMMON_SRC)
FUZZ_SRC_fuzz_authkeys := $(COMMON_SRC)
FUZZ_SRC_fuzz_alerts := $(COMMON_SRC)
FUZZ_SRC_fuzz_ckpt   := $(COMMON_SRC) $(HELPER_SRC) $(filter-out trainer/main.c,$(wildcard trainer/*.c))
FUZZ_SRC_fuzz_start  := $(COMMON_SRC) $(DISP_SRC)
FUZZ_SRC_fuzz_instr  := $(COMMON_SRC) $(HELPER_SRC)
FUZZ_SRC_fuzz_webjson := $(COMMON_SRC) web/web_body.c
FUZZ_SRC_fuzz_zmtp   := common/zmtp.c common/util.c common/log.c
FUZZ_SEEDS_fuzz_spec := tests/data/specs/valid tests/data/specs/invalid
FUZZ_SEEDS_fuzz_wire := tests/fuzz/seeds/fuzz_wire
FUZZ_SEEDS_fuzz_authkeys := tests/fuzz/seeds/fuzz_authkeys
FUZZ_SEEDS_fuzz_alerts := tests/fuzz/seeds/fuzz_alerts
FUZZ_SEEDS_fuzz_start := tests/fuzz/seeds/fuzz_start
FUZZ_SEEDS_fuzz_instr := tests/fuzz/seeds/fuzz_instr
FUZZ_SEEDS_fuzz_webjson := tests/fuzz/seeds/fuzz_webjson tests/data/specs/valid
FUZZ_SEEDS_fuzz_zmtp := tests/fuzz/seeds/fuzz_zmtp
FUZZ_MAXLEN_fuzz_zmtp := 4096
FUZZ_SEEDS_fuzz_ckpt := build-fuzz/seeds/fuzz_ckpt
FUZZ_MAXLEN_fuzz_ckpt := 65536
FUZZ_SEED_FILES := build-fuzz/seeds/fuzz_ckpt/tiny.ckpt

define FUZZ_RULE
build-fuzz/$(1): tests/fuzz/$(1).c $$(FUZZ_SRC_$(1))
	@mkdir -p build-fuzz
	clang -g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined -I. -Itrial_helper -I$(BLAS_INC) \
	    $(PKG_CFLAGS) $$< $$(FUZZ_SRC_$(1)) -o $$@ $(LIBS) -pthread
endef
$(foreach t,$(FUZZ_NAMES),$(eval $(call FUZZ_RULE,$(t))))

# A real (tiny) checkpoint for the checkpoint verifier to start from.
build-fuzz/seeds/fuzz_ckpt/tiny.ckpt: $(TRAIN_BIN)
	@mkdir -p $(dir $@)
	$(TRAIN_BIN) --dataset synthetic --synthetic-n 10 --val-size 0 --hidden 2 --epochs 1 \
	    --batch-size 5 --quiet --save $@ >/dev/null 2>&1

fuzz-build: $(FUZZ_TARGETS) $(FUZZ_SEED_FILES)

# One target: FUZZ_SECONDS from its seeds; a crash fails with its log.
fuzz-run-%:
	@mkdir -p build-fuzz/$*.corpus
	@echo "== $* ($(FUZZ_SECONDS) s)"
	@build-fuzz/$* -max_total_time=$(FUZZ_SECONDS) -max_len=$(or $(FUZZ_MAXLEN_$*),4096) \
	    -artifact_prefix=build-fuzz/$*-crash- -print_final_stats=1 \
	    build-fuzz/$*.corpus $(FUZZ_SEEDS_$*) >build-fuzz/$*.log 2>&1; rc=$$?; \
	 grep -E '^stat::number_of_executed_units|^Done' build-fuzz/$*.log | tail -2; \
	 if [ $$rc -ne 0 ]; then tail -30 build-fuzz/$*.log; \
	     echo "fuzz: $* failed (exit $$rc): see build-fuzz/$*.log"; exit 1; fi

fuzz: fuzz-build
	@for t in $(FUZZ_NAMES); do $(MAKE) --no-print-directory fuzz-run-$$t || exit 1; done

# ---- top-level commands ----------------------------------------------------
deps:
	@scripts/install-deps.sh

# `make run` installs only what building and the example need (--run).
run:
	@scripts/install-deps.sh --run
	@$(MAKE) --no-print-directory all
	@scripts/run-example.sh

# The builds inside `make test` run TEST_JOBS compiles at once (the
# machine's cores unless given): the sanitizer, TSan and fuzz builds are
# a third of the run on 2 cores when made one file at a time.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)

test: deps
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) format-check
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) all $(BUILD)/bench/scale_rig
	@if [ "$(HAVE_CUDA)" = yes ]; then $(MAKE) --no-print-directory -j$(TEST_JOBS) cuda; \
	 else echo "CUDA backend: not built (no nvcc)"; fi
	@if [ "$(HAVE_MPI)" = yes ]; then $(MAKE) --no-print-directory -j$(TEST_JOBS) cudaemu && \
	   $(MAKE) --no-print-directory -j$(TEST_JOBS) cudaemu-asan; \
	 else echo "cudaemu: not built (no MPI: the emulated NCCL runs over it)"; fi
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) SANITIZE=address,undefined $(patsubst $(BUILD)/%,build-san/%,$(UNIT_TESTS)) build-san/bin/jizhi build-san/bin/jizhi-core
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) SANITIZE=thread $(addprefix build-tsan/tests/,$(TSAN_TESTS))
	@if [ "$(HAVE_CLANG)" = yes ]; then $(MAKE) --no-print-directory -j$(TEST_JOBS) fuzz-build; \
	 else echo "fuzz targets: not built (no clang)"; fi
	@PYTHON=$(PYTHON) BUILD=$(BUILD) tests/run-all.sh

test-unit: all
	@BUILD=$(BUILD) tests/run-all.sh --unit-only

# The integration tests alone (pytest over real daemons and processes).
test-integration: all
	@JIZHI_BUILD=$(abspath $(BUILD)) $(PYTHON) -m pytest -q -rs -p no:cacheprovider tests/integration

valgrind: all
	@for t in $(UNIT_TESTS); do valgrind -q --error-exitcode=3 --leak-check=full --child-silent-after-fork=yes $$t || exit 1; done

bench: deps
	@$(MAKE) --no-print-directory all $(BENCH_PROGS) $(BENCHES)
	@PYTHON=$(PYTHON) BUILD=$(BUILD) bench/all.sh

# Guarded changes and live forks on jizhi-train (bench/safety.py): lr x20 with and
# without --guard; fork to choose lr against restarting the candidates.
.PHONY: bench-safety
bench-safety: all
	@BUILD=$(BUILD) $(PYTHON) bench/safety.py $(BENCH_SAFETY_ARGS)

# Live-change latency: scripted trials, trial set through the controller (bench/intervene.sh).
.PHONY: bench-intervene
bench-intervene: all $(BUILD)/bench/intervene_trial $(BUILD)/bench/intervene_driver
	@PYTHON=$(PYTHON) BUILD=$(BUILD) bench/intervene.sh

# What CURVE costs: ingest and trial set p99, CURVE vs --insecure plain TCP (bench/auth.sh).
.PHONY: bench-auth
bench-auth: all $(BUILD)/bench/ingest_trial $(BUILD)/bench/intervene_trial $(BUILD)/bench/intervene_driver
	@PYTHON=$(PYTHON) BUILD=$(BUILD) bench/auth.sh

# One controller under a simulated cluster: fake dispatchers and trials, users
# steering, the web API read (bench/scale.sh, bench/scale_rig.c); writes
# $(BUILD)/bench/scale.json. QUICK=1 for one small level.
.PHONY: bench-scale
bench-scale: all $(BUILD)/bench/scale_rig
	@PYTHON=$(PYTHON) BUILD=$(BUILD) bench/scale.sh

# Slurm backend overhead: start decision -> first report, Slurm vs local (bench/slurm.sh).
.PHONY: bench-slurm
bench-slurm: all $(BUILD)/bench/slurm_trial
	@PYTHON=$(PYTHON) BUILD=$(BUILD) bench/slurm.sh

# Schedulers acting on running trials against their baselines (bench/schedulers.sh
# runs each bench/schedulers_<part>.* in turn). BENCH_SCHED_ARGS="--quick" for a short run.
.PHONY: bench-schedulers
bench-schedulers: all
	@PYTHON=$(PYTHON) BUILD=$(BUILD) bench/schedulers.sh $(BENCH_SCHED_ARGS)

# The best the batch-size scheduler's moves can do, chosen in hindsight (bench/batchsize_ceiling.py).
.PHONY: bench-batchsize-ceiling
bench-batchsize-ceiling: all
	@BUILD=$(BUILD) $(PYTHON) bench/batchsize_ceiling.py $(BENCH_CEILING_ARGS)

# What jizhi.torch costs a PyTorch loop, and trial set -> both DDP ranks' optimizers
# (bench/torch_bench.py; Debian's python3 with python3-torch).
.PHONY: bench-torch
bench-torch: all
	@BUILD=$(BUILD) /usr/bin/python3 bench/torch_bench.py $(BENCH_TORCH_ARGS)

# GEMMs of the MLP, the CNN's im2col path and the bo GP through OpenBLAS (the
# kernels jizhi picks and the Prescott fallback), BLIS, oneDNN (sgemm, matmul
# fp32 and bf16) and PyTorch, alternating (bench/gemm_libs.py). The worker
# links no BLAS: it loads one library per process with dlopen.
# BENCH_GEMM_ARGS="--rounds 3 --threads 1" for a shorter run, "--check" to
# compare each library with a double reference.
GEMM_LIBS := $(BUILD)/bench/gemm_libs
$(BUILD)/obj/bench/gemm_libs.o: ALL_CFLAGS += $(if $(filter yes,$(HAVE_DNNL)),-DGEMM_HAVE_DNNL)
$(GEMM_LIBS): $(BUILD)/obj/bench/gemm_libs.o $(LIB_COMMON)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LIB_COMMON) $(ALL_LDFLAGS) $(if $(filter yes,$(HAVE_DNNL)),-ldnnl) -ldl -lm
BENCH_PROGS += $(GEMM_LIBS)
.PHONY: bench-gemm
bench-gemm: $(GEMM_LIBS)
	@BUILD=$(BUILD) /usr/bin/python3 bench/gemm_libs.py $(BENCH_GEMM_ARGS)

# ---- install ---------------------------------------------------------------
# make install [PREFIX=/usr/local] [DESTDIR=]: the commands, the helper
# library with its soname, its header, a pkg-config file with the installed
# paths, and the Python package where $(PYTHON) (Debian's python3) looks
# under PREFIX: the first *-packages folder of its sys.path below
# $(PREFIX)/lib/ (/usr/local/lib/python3.X/dist-packages for /usr/local,
# /usr/lib/python3/dist-packages for /usr); for a prefix it does not search,
# $(PREFIX)/lib/python3/dist-packages (then set PYTHONPATH).
PREFIX  ?= /usr/local
DESTDIR ?=
BINDIR  := $(PREFIX)/bin
LIBDIR  := $(PREFIX)/lib
INCDIR  := $(PREFIX)/include
PYSITE   = $(shell $(PYTHON) -I -c 'import sys; p = sys.argv[1].rstrip("/") + "/lib/"; \
             print(next((d for d in sys.path if d.startswith(p) and d.endswith("-packages")), ""))' \
             '$(PREFIX)' 2>/dev/null)
PYDIR   ?= $(or $(PYSITE),$(PREFIX)/lib/python3/dist-packages)
install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR) \
	    $(DESTDIR)$(PYDIR)/jizhi
	install -m 755 $(JIZHI) $(JIZHI_CORE) $(EXTRA_BINS) $(DESTDIR)$(BINDIR)/
	install -m 755 $(LIBJIZHI_SOV) $(DESTDIR)$(LIBDIR)/
	ln -sf libjizhi.so.$(SOMAJOR) $(DESTDIR)$(LIBDIR)/libjizhi.so
	install -m 644 $(LIBJIZHI_A) $(DESTDIR)$(LIBDIR)/
	install -m 644 trial_helper/jizhi.h $(DESTDIR)$(INCDIR)/
	sed -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCDIR)|' -e 's|@VERSION@|$(VERSION)|' \
	    trial_helper/jizhi.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/jizhi.pc
	install -m 644 trial_helper/python/jizhi/*.py $(DESTDIR)$(PYDIR)/jizhi/
	echo 'LIBJIZHI = "$(LIBDIR)/libjizhi.so.$(SOMAJOR)"' > $(DESTDIR)$(PYDIR)/jizhi/_installed.py
	@if [ -z "$(DESTDIR)" ] && command -v ldconfig >/dev/null; then ldconfig; fi

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,jizhi jizhi-core $(notdir $(EXTRA_BINS))) \
	    $(DESTDIR)$(LIBDIR)/libjizhi.so $(DESTDIR)$(LIBDIR)/libjizhi.so.$(SOMAJOR) \
	    $(DESTDIR)$(LIBDIR)/libjizhi.a $(DESTDIR)$(INCDIR)/jizhi.h $(DESTDIR)$(LIBDIR)/pkgconfig/jizhi.pc
	rm -rf $(DESTDIR)$(PYDIR)/jizhi

format:
	clang-format -i $(shell git ls-files '*.c' '*.h' '*.cu' '*.cc')

# Fails, naming the files, when any tracked C or CUDA file differs from
# .clang-format.
format-check:
	@files=$$(git ls-files '*.c' '*.h' '*.cu' '*.cc'); \
	 if ! clang-format --dry-run -Werror $$files >build-format.log 2>&1; then \
	     grep -E '^[^ ].*: error:' build-format.log | cut -d: -f1 | sort -u | sed 's/^/  not formatted: /'; \
	     echo "format-check: failed; run \`make format\`"; rm -f build-format.log; exit 1; fi; \
	 rm -f build-format.log; echo "format-check: $$(echo $$files | wc -w) files match .clang-format"

clean:
	rm -rf build build-san build-tsan build-fuzz

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
