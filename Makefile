# Thin wrapper over CMake. `make demo` runs the main job; `make test` runs every test.
BUILD ?= build
JOBS ?= 2
DEBIAN_PACKAGES := cmake g++ make pkg-config libeigen3-dev libabsl-dev libspdlog-dev libfmt-dev \
  libopenmpi-dev openmpi-bin libblis-dev libgtest-dev libbenchmark-dev zlib1g-dev libssl-dev libdw-dev nlohmann-json3-dev libcli11-dev \
  dataset-fashion-mnist fortunes
# The fuzzers need clang 16 or later with its libFuzzer runtime (Debian 12's clang 14 lacks the
# C++20 fjit uses); the sanitized builds use g++'s own ASan/UBSan/TSan runtimes.
FUZZ_PACKAGES := clang-16 libclang-rt-16-dev
FUZZ_SECONDS ?= 60
# CI (CI=true) builds with warnings as errors, so a new warning fails it.
FJIT_WERROR ?= $(if $(CI),ON,OFF)

.PHONY: deps configure build test demo lm bench clean sanitize fuzz
deps:
	@bash cmake/install_deps.sh $(DEBIAN_PACKAGES)

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DFJIT_WERROR=$(FJIT_WERROR) > /dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: configure
	@cmake --build $(BUILD) -j $(JOBS) --target train_fashion_mnist
	@$(BUILD)/examples/train_fashion_mnist --replicas 2

# The language-model job: a GPT trained on the fortunes text with 2 replicas, checks on.
lm: configure
	@cmake --build $(BUILD) -j $(JOBS) --target train_lm
	@$(BUILD)/examples/train_lm --replicas 2 --checkpoint-dir runs/lm

# The benches are not part of `make build` (bench/CMakeLists.txt); bench_optional: those built only
# when their optional library is there (bench/libtorch_step, when CMake was given a
# LibTorch: bench/libtorch.cmake).
bench: build
	@cmake --build $(BUILD) -j $(JOBS) --target benches bench_optional
	@bash bench/run_all.sh $(BUILD)

# The suite under ASan + UBSan (build-asan/), then the threaded tests under TSan (build-tsan/).
sanitize: deps
	@JOBS=$(JOBS) bash tests/sanitizers/run.sh address build-asan
	@JOBS=$(JOBS) bash tests/sanitizers/run.sh thread build-tsan

# Builds the libFuzzer harnesses (build-fuzz/) and runs each for FUZZ_SECONDS.
fuzz:
	@bash cmake/install_deps.sh $(FUZZ_PACKAGES)
	@cmake -S tests/fuzz -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-16 > /dev/null
	@cmake --build build-fuzz -j $(JOBS)
	@bash tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD)
