# trainer/trainer.mk - rules for jizhi-train (included by the top Makefile
# before its own rules).
#
#   make                  builds $(BUILD)/bin/jizhi-train (CPU backend)
#   make cuda             builds $(BUILD)/bin/jizhi-train-cuda (needs nvcc;
#                         never part of `make all`/`make test`)
#   make bench-train      jizhi-train vs PyTorch, samples/s and large batch

TRN_SRC     := $(filter-out trainer/main.c,$(wildcard trainer/*.c))
TRN_OBJ     := $(call obj,$(TRN_SRC))
TRN_MAIN    := $(call obj,trainer/main.c)
LIB_TRN     := $(BUILD)/lib/libjztrn.a
TRAIN_BIN   := $(BUILD)/bin/jizhi-train
TRAIN_CUDA  := $(BUILD)/bin/jizhi-train-cuda

INTERNAL_LIBS := $(LIB_TRN) $(INTERNAL_LIBS)

# MPI (optional): the MPI backend of the comm layer where mpicc exists;
# without it comm_mpi.c says so at run time. Linked into every program that
# links the trainer library (jizhi-train, its unit tests).
ifeq ($(HAVE_MPI),yes)
MPI_CFLAGS  := $(shell mpicc --showme:compile) -DTRN_HAVE_MPI
MPI_LIBS    := $(shell mpicc --showme:link)
$(call obj,trainer/comm_mpi.c) $(call obj,bench/comm_allreduce.c): ALL_CFLAGS += $(MPI_CFLAGS)
LIBS        += $(MPI_LIBS)
endif
EXTRA_BINS  += $(TRAIN_BIN)

# oneDNN (optional): the CNN's convolutions through oneDNN (conv_dnnl.c)
# and the MLP's linears (linear_dnnl.c), with their primitive cache
# (dnnl_cache.c), where libdnnl-dev is installed; without it conv_dnnl.c
# and linear_dnnl.c compile to stubs (dnnl_cache.c to nothing)
# and the network keeps the im2col + GEMM path. Its OpenMP runtime takes
# the thread count from backend_cpu.c.
ifeq ($(HAVE_DNNL),yes)
$(call obj,trainer/conv_dnnl.c) $(call obj,trainer/linear_dnnl.c) $(call obj,trainer/dnnl_cache.c): ALL_CFLAGS += -DTRN_HAVE_DNNL -fopenmp
$(call obj,trainer/kernels_nhwc.c) $(call obj,trainer/precision.c): ALL_CFLAGS += -fopenmp
LIBS        += -Wl,--push-state,--as-needed -ldnnl -lgomp -Wl,--pop-state
endif

# OpenBLAS's cblas.h for the trainer's objects only (GSL's gsl_cblas.h
# never meets it in one file).
$(TRN_OBJ) $(TRN_MAIN) $(patsubst tests/%.c,$(BUILD)/obj/tests/%.o,$(wildcard tests/test_trn_*.c)): ALL_CFLAGS += -I$(BLAS_INC)
# The trainer's element-wise loops (optimisers, rounding, BN) want the
# vectoriser's full cost model; -O3 after the global -O2 wins.
$(TRN_OBJ): ALL_CFLAGS += -O3
# SGD's clones round as its baseline (optim.c): no FMA contraction there.
$(call obj,trainer/optim.c): ALL_CFLAGS += -ffp-contract=off

$(LIB_TRN): $(TRN_OBJ)

$(TRAIN_BIN): $(TRN_MAIN) $(LIB_TRN) $(LIB_HELPER) $(LIB_COMMON)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(TRN_MAIN) $(LIB_TRN) $(LIB_HELPER) $(LIB_COMMON) $(ALL_LDFLAGS) $(LIBS)

# ---- CUDA flavour ----------------------------------------------------------
CUDA_HOME   ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH   ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
               -gencode arch=compute_90,code=compute_90
NVCCFLAGS   ?= -O2 -std=c++17 $(CUDA_ARCH) -Xcompiler -fPIC,-Wall
TRN_CUDA_OBJ := $(BUILD)/obj/trainer/backend_cuda.o
TRN_DDEV_OBJ := $(BUILD)/obj/trainer/dist_dev.o
TRN_MAIN_CUDA := $(BUILD)/obj/trainer/main_cuda.o

# The residual CNN on cuDNN (issue 38, item 4; backend_cudnn.cu), built where
# cudnn.h is found; libcudnn is opened at run time by the first CNN attach,
# so jizhi-train-cuda does not need it to start. The CPU build never needs
# cuDNN.
CUDNN_H     := $(firstword $(wildcard $(CUDA_HOME)/include/cudnn.h /usr/include/cudnn.h \
                 /usr/include/x86_64-linux-gnu/cudnn.h))
HAVE_CUDNN  := $(if $(CUDNN_H),yes,no)
ifeq ($(HAVE_CUDNN),yes)
TRN_CUDNN_OBJ := $(BUILD)/obj/trainer/backend_cudnn.o
CUDNN_DEF   := -DTRN_WITH_CUDNN
endif
$(BUILD)/obj/trainer/backend_cudnn.o: trainer/backend_cudnn.cu trainer/cuda_mlp_kernels.cuh trainer/layout.h \
                 trainer/gather.h trainer/trn.h trainer/dev_elem.cuh trainer/cuda_check.cuh \
                 trainer/cnn_layout.h trainer/cudnn_host.h trainer/dist_dev.h trainer/dist.h \
                 trainer/comm.h trainer/cuda_cnn_kernels.cuh trainer/cudnn_dl.cuh \
                 trainer/cudnn_bufs.cuh trainer/cuda_bn_kernels.cuh trainer/bn_half.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -I. -Itrial_helper -I$(dir $(CUDNN_H)) -c $< -o $@

.PHONY: cuda bench-train
ifeq ($(HAVE_CUDA),yes)
cuda: $(TRAIN_CUDA)
else
cuda:
	@echo "make cuda: nvcc not found (install the CUDA toolkit or set NVCC=...)"; exit 1
endif

$(TRN_CUDA_OBJ): trainer/backend_cuda.cu trainer/cuda_mlp_kernels.cuh trainer/cuda_mlp_state.cuh \
                 trainer/cuda_mlp_lt.cuh trainer/gather.h \
                 trainer/trn.h trainer/dist_dev.h trainer/dist.h \
                 trainer/comm.h trainer/bf16.h trainer/dev_elem.cuh trainer/cuda_check.cuh \
                 trainer/graph_policy.h trainer/cuda_mlp_graph.cuh trainer/cuda_mlp_half.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -I. -Itrial_helper $(CUDNN_DEF) -c $< -o $@

# The NCCL backend of the comm layer (comm_nccl.cu) where nccl.h exists.
ifeq ($(HAVE_NCCL),yes)
TRN_NCCL_OBJ := $(BUILD)/obj/trainer/comm_nccl.o
NCCL_DEF    := -DTRN_WITH_NCCL
NCCL_LIBS   := -lnccl
NCCL_INC    := $(patsubst %/nccl.h,-I%,$(firstword $(wildcard /usr/include/nccl.h $(CUDA_HOME)/include/nccl.h)))
endif

$(TRN_NCCL_OBJ): trainer/comm_nccl.cu trainer/comm.h trainer/bf16.h trainer/comm_nccl.h trainer/trn.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -I. -Itrial_helper $(NCCL_INC) $(MPI_CFLAGS) -c $< -o $@

# The CUDA backend's gradient exchange (device path with NCCL, host path
# through the comm layer).
$(TRN_DDEV_OBJ): trainer/dist_dev.cu trainer/dist_dev.h trainer/dist.h trainer/comm.h trainer/bf16.h \
                 trainer/comm_nccl.h trainer/devplan.h trainer/ring.h trainer/trn.h \
                 trainer/dev_elem.cuh trainer/cuda_check.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -I. -Itrial_helper $(NCCL_INC) $(NCCL_DEF) -c $< -o $@

$(TRN_MAIN_CUDA): trainer/main.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -I$(BLAS_INC) -DTRN_WITH_CUDA $(NCCL_DEF) -c $< -o $@

$(TRAIN_CUDA): $(TRN_MAIN_CUDA) $(TRN_CUDA_OBJ) $(TRN_DDEV_OBJ) $(TRN_NCCL_OBJ) $(TRN_CUDNN_OBJ) \
               $(LIB_TRN) $(LIB_HELPER) $(LIB_COMMON)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(TRN_MAIN_CUDA) $(TRN_CUDA_OBJ) $(TRN_DDEV_OBJ) $(TRN_NCCL_OBJ) $(TRN_CUDNN_OBJ) \
	    $(LIB_TRN) \
	    $(LIB_HELPER) \
	    $(LIB_COMMON) $(ALL_LDFLAGS) $(LIBS) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
	    $(NCCL_LIBS) -lcublasLt -lcublas -lcudart -ldl -lstdc++

# All-reduce bandwidth, fusion, convergence and the scaling model
# (bench/comm.py; BENCH_COMM_ARGS="--quick" for a short run).
COMM_BENCH := $(BUILD)/bench/comm_allreduce
$(COMM_BENCH): $(call obj,bench/comm_allreduce.c) $(LIB_TRN) $(LIB_HELPER) $(LIB_COMMON)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LIB_TRN) $(LIB_HELPER) $(LIB_COMMON) $(ALL_LDFLAGS) $(LIBS)

.PHONY: bench-comm
bench-comm: $(TRAIN_BIN) $(COMM_BENCH)
	@BUILD=$(BUILD) $(PYTHON) bench/comm.py $(BENCH_COMM_ARGS)

bench-train: $(TRAIN_BIN)
	@PYTHON=$(PYTHON) BUILD=$(BUILD) bench/train.sh
