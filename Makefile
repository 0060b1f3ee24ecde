# Two commands do all the set-up on a fresh Debian machine:
#   make demo   installs missing packages, builds, and runs the main job
#   make test   installs missing packages, builds, and runs every test
PRESET ?= default
ifeq ($(PRESET),default)
BUILD_DIR ?= build
else
BUILD_DIR ?= build-$(PRESET)
endif
JOBS ?= $(shell nproc)
DEMO_DIR ?= $(BUILD_DIR)/demo

.PHONY: all deps configure build test demo bench netem fuzz format clean

all: build

deps:
	@./deploy/install-deps.sh

configure: deps
	@cmake --preset $(PRESET) >/dev/null

build: configure
	@cmake --build --preset $(PRESET) -j $(JOBS)

test: build
	@ctest --preset $(PRESET) -j $(JOBS)

demo: build
	@./examples/demo.sh $(BUILD_DIR) $(DEMO_DIR)

bench: build
	@./bench/run_all.sh $(BUILD_DIR)

# The cluster on an emulated network (root): make netem NETEM_ARGS="--hot-rows both --pipeline both"
NETEM_ARGS ?=
netem: build
	@./bench/netem_cluster.sh $(BUILD_DIR) $(NETEM_ARGS)

# Coverage-guided fuzzing (clang-14 libFuzzer, ASan + UBSan): make fuzz FUZZ_SECONDS=600
FUZZ_SECONDS ?= 600
fuzz: deps
	@./tests/fuzz/run_fuzzers.sh $(FUZZ_SECONDS)

# Chaos soak of a local cluster (not in make test): kill -9, SIGSTOP and coordinator kills while
# checkpointing jobs run; prints a JSON summary. make soak SOAK_SECONDS=600 SOAK_SEED=N
SOAK_SECONDS ?= 600
SOAK_SEED ?=
.PHONY: soak
soak: build
	@SOAK_SECONDS=$(SOAK_SECONDS) SOAK_SEED=$(SOAK_SEED) nice -n 10 ./tests/soak/chaos_soak.sh --build-dir $(BUILD_DIR)

format:
	@git ls-files '*.h' '*.cc' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	@rm -rf $(BUILD_DIR)
