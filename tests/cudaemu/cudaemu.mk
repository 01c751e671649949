# tests/cudaemu/cudaemu.mk - the CUDA trainer's own code built on cudaemu,
# the CPU emulation of the CUDA APIs it calls (tests/cudaemu/README.md), for
# the tests that run it where no GPU is. Included by the top Makefile.
#
#   make cudaemu   builds $(BUILD)/cudaemu/jizhi-train-cudaemu (backend_cuda.cu,
#                  backend_cudnn.cu, dist_dev.cu, comm_nccl.cu compiled by g++
#                  against the stand-in headers, launches rewritten by
#                  launch.py) and $(BUILD)/cudaemu/lib/libcudnn.so.9, the
#                  emulated cuDNN it opens. Needs g++ and MPI (the emulated
#                  NCCL runs over MPI); no CUDA toolkit.
#   make cudaemu-asan  the same in $(BUILD)/cudaemu-asan under
#                  AddressSanitizer (what test_cudaemu.py runs it for: a
#                  kernel indexing past a buffer). EMU_SAN: extra
#                  flags for its C++ (EMU_SAN=-fsanitize=address: every
#                  device buffer is a malloc'd block, so a kernel or a
#                  library call past one is AddressSanitizer's report).

EMU_DIR     := $(BUILD)/cudaemu
EMU_BIN     := $(EMU_DIR)/jizhi-train-cudaemu
EMU_DNN     := $(EMU_DIR)/lib/libcudnn.so.9
EMU_SELF    := $(EMU_DIR)/cudaemu-selftest
EMU_TWIN    := $(EMU_DIR)/cudaemu-twin-bn
EMU_CXX     ?= $(if $(filter yes,$(HAVE_MPI)),mpicxx,g++)
EMU_FLAGS   := -std=c++17 -O2 -g -fPIC -pthread -Wall -Wno-sign-compare -ffp-contract=off -DOMPI_SKIP_MPICXX -U_FORTIFY_SOURCE \
               -Itests/cudaemu/include -Itests/cudaemu -I$(EMU_DIR)/src -I. -Itrial_helper \
               $(MPI_CFLAGS) $(EMU_SAN)
EMU_TRN     := backend_cuda backend_cudnn dist_dev comm_nccl
EMU_OWN     := runtime blas nccl
EMU_HDRS    := $(wildcard tests/cudaemu/include/*.h) tests/cudaemu/emu.h
EMU_CUH     := $(patsubst trainer/%,$(EMU_DIR)/src/trainer/%,$(wildcard trainer/*.cuh))
EMU_OBJ     := $(addprefix $(EMU_DIR)/obj/,$(addsuffix .o,$(EMU_TRN) $(EMU_OWN))) \
               $(EMU_DIR)/obj/main_cuda.o

.PHONY: cudaemu cudaemu-asan
cudaemu: $(EMU_BIN) $(EMU_DNN) $(EMU_SELF) $(EMU_TWIN)

# the same under AddressSanitizer, in $(BUILD)/cudaemu-asan (the trainer's
# C libraries as they are; the CUDA code and the emulation instrumented)
cudaemu-asan:
	@$(MAKE) --no-print-directory EMU_DIR=$(BUILD)/cudaemu-asan \
	    EMU_SAN="-fsanitize=address -fno-omit-frame-pointer" cudaemu

# launch.py: nvcc's <<< >>> into emu_launch, line numbers kept
$(EMU_DIR)/src/trainer/%: trainer/% tests/cudaemu/launch.py
	@mkdir -p $(dir $@)
	@$(PYTHON) tests/cudaemu/launch.py $< $@

$(EMU_DIR)/obj/%.o: $(EMU_DIR)/src/trainer/%.cu $(EMU_CUH) $(EMU_HDRS) $(wildcard trainer/*.h)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_FLAGS) -DTRN_WITH_CUDNN -DTRN_WITH_NCCL -x c++ -c $< -o $@

$(EMU_DIR)/obj/%.o: tests/cudaemu/%.cc $(EMU_HDRS)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_FLAGS) -c $< -o $@

$(EMU_DIR)/obj/main_cuda.o: trainer/main.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -I$(BLAS_INC) -DTRN_WITH_CUDA -DTRN_WITH_NCCL -c $< -o $@

$(EMU_BIN): $(EMU_OBJ) $(LIB_TRN) $(LIB_HELPER) $(LIB_COMMON)
	@mkdir -p $(dir $@)
	$(EMU_CXX) -o $@ $(EMU_OBJ) $(LIB_TRN) $(LIB_HELPER) $(LIB_COMMON) $(ALL_LDFLAGS) \
	    $(LIBS) $(EMU_SAN) -rdynamic -Wl,-rpath,'$$ORIGIN/lib' -ldl

# the emulation's own checks (selftest.cc, kernels in CUDA's syntax)
$(EMU_DIR)/src/selftest.cc: tests/cudaemu/selftest.cc tests/cudaemu/launch.py
	@mkdir -p $(dir $@)
	@$(PYTHON) tests/cudaemu/launch.py $< $@
$(EMU_SELF): $(EMU_DIR)/src/selftest.cc $(EMU_DIR)/obj/runtime.o
	$(EMU_CXX) $(EMU_FLAGS) $^ -o $@

# the bf16 BatchNorm kernels against their CPU twin, bit for bit (twin_bn.cc)
$(EMU_DIR)/src/twin_bn.cc: tests/cudaemu/twin_bn.cc tests/cudaemu/launch.py
	@mkdir -p $(dir $@)
	@$(PYTHON) tests/cudaemu/launch.py $< $@
$(EMU_TWIN): $(EMU_DIR)/src/twin_bn.cc $(EMU_DIR)/obj/runtime.o $(call obj,trainer/bn_half.c) \
	    $(EMU_CUH) $(EMU_HDRS) trainer/bn_half.h
	$(EMU_CXX) $(EMU_FLAGS) $(EMU_DIR)/src/twin_bn.cc $(EMU_DIR)/obj/runtime.o \
	    $(call obj,trainer/bn_half.c) -o $@

EMU_DNN_SRC := tests/cudaemu/dnn.cc tests/cudaemu/dnn_compute.cc
$(EMU_DNN): $(EMU_DNN_SRC) tests/cudaemu/dnn_impl.h $(EMU_HDRS)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_FLAGS) -shared -Wl,-soname,libcudnn.so.9 $(EMU_DNN_SRC) -o $@
