# Thin wrapper over CMake. `make demo` runs the main job; `make test` runs every test.
BUILD ?= build
JOBS ?= 2
DEBIAN_PACKAGES := cmake g++ make pkg-config libeigen3-dev libabsl-dev libspdlog-dev libfmt-dev \
  libopenmpi-dev openmpi-bin libgtest-dev libbenchmark-dev zlib1g-dev libdw-dev nlohmann-json3-dev libcli11-dev \
  dataset-fashion-mnist

.PHONY: deps configure build test demo bench clean
deps:
	@bash cmake/install_deps.sh $(DEBIAN_PACKAGES)

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > /dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: configure
	@cmake --build $(BUILD) -j $(JOBS) --target train_fashion_mnist
	@$(BUILD)/examples/train_fashion_mnist --replicas 2

bench: build
	@bash bench/run_all.sh $(BUILD)

clean:
	rm -rf $(BUILD)
