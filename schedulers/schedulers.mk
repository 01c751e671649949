# schedulers.mk - scheduler-specific rules, included by the top Makefile.
#
#   make bench-bo     jizhi bo and random against Optuna (TPE, GP) and
#                     scikit-optimize gp_minimize, where installed, on six
#                     test functions; plus bo suggestion latency.
#                     BENCH_BO_ARGS="--seeds 3 --evals 30" for a quick run.
#   make bench-bo-large
#                     bo past 1 000 finished trials (issue 43): from one
#                     history per seed, K more suggestions by bo's subset
#                     rules, the exact GP, tpe and cmaes (bench/bo_large.py;
#                     BENCH_BO_LARGE_ARGS="--hist 1000 --k 20 --seeds 3").
#   make bench-importance
#                     `study importance` (Sobol indices of the GP mean)
#                     against Optuna's fANOVA evaluator on the same trials
#                     and the functions' true first-order indices.
#
# The drivers (bench/bench_bo.c, bench/bench_mo.c) live with every other
# benchmark under bench/; they link the scheduler library, so the generic
# bench/*.c rule of the top Makefile leaves them to the rules here.

# Nothing in a scheduler is sized by user input on the stack.
$(call obj,$(SCHED_SRC)): ALL_CFLAGS += -Wvla

# sched_bo.c sets OpenBLAS's thread count through OpenBLAS's own cblas.h.
$(BUILD)/obj/schedulers/sched_bo.o: ALL_CFLAGS += -I$(BLAS_INC)

BENCH_BO := $(BUILD)/bin/bench_bo

$(BENCH_BO): $(BUILD)/obj/bench/bench_bo.o $(LIB_SCHED) $(LIB_COMMON)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LIB_SCHED) $(LIB_COMMON) $(ALL_LDFLAGS) $(LIBS)

BENCHES += $(BENCH_BO)

.PHONY: bench-bo
bench-bo: $(BENCH_BO)
	@PYTHON=$(PYTHON) BENCH_BO=$(BENCH_BO) bench/bo.sh $(BENCH_BO_ARGS)

.PHONY: bench-bo-large
bench-bo-large: $(BENCH_BO)
	@PYTHON=$(PYTHON) BENCH_BO=$(BENCH_BO) bench/bo.sh large $(BENCH_BO_LARGE_ARGS)

.PHONY: bench-importance
bench-importance: $(BENCH_BO)
	@PYTHON=$(PYTHON) bench/peers-install.sh
	@$(PYTHON) bench/bench_importance.py --driver $(BENCH_BO) $(BENCH_IMPORTANCE_ARGS)

#   make bench-mo     multi-objective and constrained bo against Optuna
#                     (NSGA-II, multi-objective TPE, constraints_func):
#                     hypervolume after 50 and 100 evaluations, 10 seeds.
#                     BENCH_MO_ARGS="--quick" for 3 seeds.
BENCH_MO := $(BUILD)/bin/bench_mo

$(BENCH_MO): $(BUILD)/obj/bench/bench_mo.o $(LIB_SCHED) $(LIB_COMMON)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LIB_SCHED) $(LIB_COMMON) $(ALL_LDFLAGS) $(LIBS)

BENCHES += $(BENCH_MO)

.PHONY: bench-mo
bench-mo: $(BENCH_MO)
	@$(PYTHON) bench/bench_mo.py --driver $(BENCH_MO) --out $(BUILD)/bench/bench_mo.json $(BENCH_MO_ARGS)

#   make bench-mf     multi-fidelity: jizhi bo with asha or hyperband (and
#                     references) against Optuna TPE + HyperbandPruner on
#                     Fashion-MNIST with jizhi-train, best val_acc against
#                     CPU-seconds, 3 seeds (bench/mf.py; JSON in
#                     build/bench/mf.json). BENCH_MF_ARGS="--quick" for 1 seed.
.PHONY: bench-mf
bench-mf: all
	@PYTHON=$(PYTHON) bench/peers-install.sh
	@BUILD=$(BUILD) $(PYTHON) bench/mf.py $(BENCH_MF_ARGS)
