# The two commands of the README, and a few conveniences. All real work is in CMake and scripts/.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build demo test bench faults fuzz load format clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja: CMakeLists.txt | deps
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)

test: build
	cd $(BUILD) && ctest --output-on-failure -j 2 --timeout 900

# The side-by-side comparison on the CPU with the tiny model (bench/compare.sh; GPU runs: BENCH.md).
bench: build
	$(BUILD)/tandem synth --preset tiny -o $(BUILD)/bench-tiny.gguf >/dev/null
	BENCH_ARGS="--runs 3 --gen-tokens 64 --prefill-tokens 128,512 --ttft-tokens 128" CONTEXT=2048 \
	  MACHINE=$${MACHINE:-$$(hostname)-cpu} bench/compare.sh $(BUILD) $(BUILD)/bench-tiny.gguf 2

# Reliability suites (docs/reliability.md); each prints its figures and fails on a broken promise.
# faults: every fault case 10 times (root: network namespaces); fuzz: 1M executions per target
# under ASan + UBSan (installs clang if missing); load: 64 clients for 5 minutes on loopback.
faults: build
	cd $(BUILD) && TANDEM_FAULT_REPORT=$(CURDIR)/$(BUILD)/faults.md tests/faults/faults_test \
	  --gtest_also_run_disabled_tests --gtest_filter=Faults.DISABLED_Suite

fuzz: deps
	scripts/fuzz.sh $(CURDIR)/$(BUILD)-fuzz

load: build
	cd $(BUILD) && TANDEM_LOAD_REPORT=$(CURDIR)/$(BUILD)/load.txt tests/load/load_test \
	  --gtest_also_run_disabled_tests --gtest_filter=Load.DISABLED_Full

# Formats every C++ file of src/ and tests/ by .clang-format (make test checks it).
format: deps
	@scripts/format.sh

clean:
	rm -rf $(BUILD)
