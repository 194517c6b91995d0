# The two commands of the README, and a few conveniences. All real work is in CMake and scripts/.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build demo test bench clean

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

clean:
	rm -rf $(BUILD)
