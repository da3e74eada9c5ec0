# Thin wrapper over CMake/CTest. `make` builds build/attnlab; `make test` and
# `make demo` first install what is missing (scripts/install-deps.sh).
JOBS ?= $(shell nproc)
BUILD ?= build

.PHONY: all deps test-deps configure test demo clean bench

all: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

deps:
	@sh scripts/install-deps.sh

test-deps:
	@sh scripts/install-deps.sh --test

# Unit + reference + CLI tests, then the unit tests again under ASan + UBSan.
test: test-deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)
	@cmake -S . -B $(BUILD)-asan -DAL_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)
	@cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp ctest --output-on-failure -R '^unit\.'
	@cd $(BUILD) && ctest --output-on-failure

demo: all
	@sh scripts/demo.sh

bench: all
	@$(BUILD)/attnlab bench train

clean:
	rm -rf $(BUILD) $(BUILD)-asan
