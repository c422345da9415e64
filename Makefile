# Thin wrapper over CMake: the two commands of the README's Quick start.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

# Sanitizer tests (part of `test`): the hostile-input and service tests, built by GCC with
# ASan + UBSan (KILN_SANITIZE) in a folder of their own. Only these targets and what they link
# are built; README "Fuzzing and sanitizers" says why these.
ASAN_DIR ?= build-asan
ASAN_TESTS ?= import_test engine_blob_test precision_policy_test runtime_memory_planner_test \
	runtime_session_pool_test cli_errors_test server_test server_process_test server_hostile_test \
	fuzz_regressions_test fuzz_onnx_mutator_test e2e_control_flow_test e2e_sequences_test \
	kernels_avx512_broadcast_test kernels_memory_ops_test kernels_quant_fast_test \
	kernels_resize_fast_test kernels_deconv_pool_dnnl_test passes_qdq_integer_test cli_threads_test \
	kernels_conv_dnnl_nchw_x_test \
	kernels_lstm_int8_r_test kernels_quant_integer_to_float_test kernels_avx512_reduce_test kernels_avx512_f16_parity_test \
	passes_quant_lowering_test kernels_quant_mixed_io_test \
	kernels_avx512_attention_test passes_fusion_test kernels_avx512_cast_test kernels_avx512_topk_pad_test \
	kernels_conv_chain_pool_test passes_matmul_integer_to_float_test kernels_parallel_test

# Fuzzing (not part of `test`): libFuzzer harnesses of tests/fuzz, built by clang-14 with ASan +
# UBSan in FUZZ_DIR, each run FUZZ_SECONDS (FUZZ_PARALLEL at a time); fails when any harness
# finds a crash.
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_CXX ?= clang++-14
FUZZ_TARGETS ?=
FUZZ_PARALLEL ?= 1

.PHONY: all deps build test asan fuzz fuzz-build demo conformance clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Every test but the `slow` label.
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -LE slow
	$(MAKE) --no-print-directory asan

# Shared libraries and line tables only (-g1, all that ASan's reports need): with static
# libraries and full debug information each test binary was ~0.8 GB, ~24 GB in all, and a CI
# machine ran out of disk.
asan: deps
	cmake -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=ON \
	  -DKILN_BUILD_BENCH=OFF -DBUILD_SHARED_LIBS=ON -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
	cmake --build $(ASAN_DIR) -j $(JOBS) --target $(ASAN_TESTS)
	python3 tests/sanitizers/run_tests.py $(ASAN_DIR) $(JOBS) $(ASAN_TESTS)

fuzz-build: deps
	@bash scripts/install-deps.sh clang-14 libfuzzer-14-dev libomp-14-dev
	cmake -S . -B $(FUZZ_DIR) -DCMAKE_CXX_COMPILER=$(FUZZ_CXX) -DKILN_FUZZ=ON \
	  -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target kiln_fuzzers

# Engine seeds come from the kiln CLI of the normal build.
fuzz: fuzz-build $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS) --target kiln
	bash tests/fuzz/make_corpus.sh $(FUZZ_DIR) $(BUILD_DIR)/tools/kiln
	FUZZ_PARALLEL=$(FUZZ_PARALLEL) bash tests/fuzz/run_fuzzers.sh $(FUZZ_DIR) $(FUZZ_SECONDS) \
	  $(FUZZ_TARGETS)

# The full conformance run (label `slow` included).
conformance: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L conformance

demo: build
	bash scripts/demo.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR)
