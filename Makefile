# Thin wrapper over CMake/CTest. `make` builds build/attnlab; `make test` and
# `make demo` first install what is missing (scripts/install-deps.sh).
JOBS ?= $(shell nproc)
BUILD ?= build

.PHONY: all deps test-deps configure test demo clean bench fuzz coverage analyze

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
	@cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp ctest --output-on-failure -R '^(unit|fuzz)\.'
	@cd $(BUILD) && ctest --output-on-failure

# The libFuzzer harnesses of tests/fuzz (clang-14, ASan + UBSan), each for FUZZ_SECONDS, one after the other;
# FUZZ_ONLY="config npy" picks some (docs/fuzzing.md). `make test` replays their corpora without clang.
FUZZ_SECONDS ?= 60
FUZZ_ONLY ?=
fuzz: test-deps
	@cmake -S . -B $(BUILD)-fuzz -DAL_FUZZ=ON -DCMAKE_C_COMPILER=clang-14 -DCMAKE_BUILD_TYPE=Debug >/dev/null
	@cmake --build $(BUILD)-fuzz -j $(JOBS) --target fuzz_harnesses
	@sh scripts/fuzz.sh $(BUILD)-fuzz $(FUZZ_SECONDS) $(FUZZ_ONLY)

# Which lines of src/ the tests run: an instrumented build in $(BUILD)-cov, the suite, gcov's counts
# (docs/coverage.md).
coverage: test-deps
	@bash scripts/coverage.sh --build $(BUILD)-cov --jobs $(JOBS)

# clang-14's static analyzer over the library and the CLI, each finding with its path (docs/static-analysis.md).
analyze: test-deps
	@bash scripts/analyze.sh --build $(BUILD)-analyze --jobs $(JOBS)

demo: all
	@sh scripts/demo.sh

bench: all
	@$(BUILD)/attnlab bench train

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-fuzz $(BUILD)-cov $(BUILD)-analyze
