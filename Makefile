# The two commands of the README, and a few conveniences. All real work is in CMake and scripts/.
BUILD ?= build
JOBS ?= $(shell nproc)
# Extra CMake flags; other flags than last time configure $(BUILD) again (scripts/configure.sh),
# none keeps its configuration.
CMAKE_FLAGS ?=
# TANDEM_CUDA=AUTO|ON|OFF (make variable or environment): llama.cpp's CUDA backend. Unset, CMake's
# default AUTO builds for CUDA when an nvcc and an NVIDIA GPU are here (docs/building.md, "CUDA").
ifneq ($(strip $(TANDEM_CUDA)),)
  CUDA_FLAG := -DTANDEM_CUDA=$(TANDEM_CUDA)
endif

.PHONY: all deps test-deps configure build demo test bench faults fuzz load format clean \
  cross-deps build-arm64 test-arm64 tsan

all: build

# What building and `make demo` need (scripts/install-deps.sh); test-deps adds what only the tests
# need: clang-format 14, a browser where the distribution has one as a package, Node.js >= 22.
deps:
	@scripts/install-deps.sh

test-deps:
	@scripts/install-deps.sh --test

configure: deps
	@scripts/configure.sh $(BUILD) $(CMAKE_FLAGS) $(CUDA_FLAG)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)

test: test-deps build
	cd $(BUILD) && ctest --output-on-failure -j 2 --timeout 900

# The side-by-side comparison on the CPU with the tiny model (bench/compare.sh; GPU runs: BENCH.md).
bench: build
	$(BUILD)/tandem synth --preset tiny -o $(BUILD)/bench-tiny.gguf >/dev/null
	BENCH_ARGS="--runs 3 --gen-tokens 64 --prefill-tokens 128,512 --ttft-tokens 128" CONTEXT=2048 \
	  MACHINE=$${MACHINE:-$$(hostname)-cpu} bench/compare.sh $(BUILD) $(BUILD)/bench-tiny.gguf 2

# arm64 (GB10's cores) checked on an x86 host (docs/building.md, "Cross build for arm64"):
# build-arm64 cross-compiles llama.cpp (its own cache key, CPU only, -march=armv9-a+i8mm+bf16) and
# tandem into $(ARM64_BUILD) with Debian's cross toolchain; test-arm64 runs the in-process suites
# under qemu-aarch64 (scripts/test-arm64.sh --list: which run there, which stay x86-only and why).
ARM64_BUILD ?= build-arm64
cross-deps:
	@scripts/install-cross.sh

build-arm64: deps cross-deps
	@scripts/configure.sh $(ARM64_BUILD) -DCMAKE_TOOLCHAIN_FILE=$(CURDIR)/cmake/aarch64-linux-gnu.cmake \
	  -DTANDEM_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(ARM64_BUILD) -j $(JOBS) --target tandem tandem-engine

test-arm64: build-arm64
	JOBS=$(JOBS) scripts/test-arm64.sh $(ARM64_BUILD)

# ThreadSanitizer run of the multi-threaded suites (engine, gateway, link, worker) in build-tsan.
tsan: deps
	JOBS=$(JOBS) scripts/tsan.sh $(BUILD)-tsan

# Reliability suites (docs/reliability.md); each prints its figures and fails on a broken promise.
# faults: every fault case 10 times (root: network namespaces); fuzz: 1M executions per target
# under ASan + UBSan (installs clang if missing; RUNS=N for fewer: .ci/run's smoke builds every
# target and runs each 10,000 times); load: 64 clients for 5 minutes on loopback, the engine's
# memory judged less its prompt cache's own figure (docs/reliability.md, "Load").
faults: test-deps build
	cd $(BUILD) && TANDEM_FAULT_REPORT=$(CURDIR)/$(BUILD)/faults.md tests/faults/faults_test \
	  --gtest_also_run_disabled_tests --gtest_filter=Faults.DISABLED_Suite

fuzz: deps
	scripts/fuzz.sh $(CURDIR)/$(BUILD)-fuzz

load: build
	cd $(BUILD) && TANDEM_LOAD_REPORT=$(CURDIR)/$(BUILD)/load.txt tests/load/load_test \
	  --gtest_also_run_disabled_tests --gtest_filter=Load.DISABLED_Full

# Formats every C++ file of src/ and tests/ by .clang-format with the pinned clang-format 14
# (make test checks it).
format: test-deps
	@scripts/format.sh

clean:
	rm -rf $(BUILD)
