# slurm-run: the two commands of the README, plus benches and soaks.
SHELL := /bin/bash
.DEFAULT_GOAL := test
TESTBED_ENV = eval "$$(testbed/env)"

.PHONY: demo test bench soak testbed-up testbed-down testbeds-up testbeds-down lint

testbed-up:
	testbed/up

testbed-down:
	testbed/down

## The three test beds side by side (Slurm 22.05, 24.11, 26.05; where: testbed/beds).
testbeds-up:
	testbed/beds up

testbeds-down:
	testbed/beds down

## Run the quickstart example (preflight, submit a two-node job, watch it, show its log) against the local test bed.
demo: testbed-up
	$(TESTBED_ENV) && cargo run --example quickstart

## Bring the three test beds up and run every test but the soak on Slurm 22.05 (unit, conformance,
## end-to-end), then the test-bed tests (the Backend and Transport conformance suites and every
## end-to-end test) on 24.11 and on 26.05; every release runs even when one fails.
## The test-bed tests mostly wait on the cluster, so four test threads (RUST_TEST_THREADS) even on two cores.
## When a test fails, the end of the output repeats what each failed test said (testbed/failures).
test: testbeds-up
	@status=0; logs=$$(mktemp -d); trap 'rm -rf "$$logs"' EXIT; while read -r release dir offset; do \
	  echo "==== Slurm $$release test bed ($$dir, port offset $$offset) ===="; \
	  if [ "$$release" = 22.05 ]; then scope="--workspace"; else scope="--test testbed"; fi; \
	  ( eval "$$(SLURM_RUN_TESTBED_DIR=$$dir SLURM_RUN_TESTBED_PORT_OFFSET=$$offset testbed/env)" && \
	    RUST_TEST_THREADS=$${RUST_TEST_THREADS:-4} cargo test $$scope --features testbed --no-fail-fast ) 2>&1 | \
	    tee "$$logs/$$release.log"; \
	  if [ "$${PIPESTATUS[0]}" != 0 ]; then status=1; echo "==== Slurm $$release: FAILED ===="; fi; \
	done < <(testbed/beds); \
	if [ "$$status" != 0 ]; then echo "==== What the failed tests said ===="; testbed/failures "$$logs"/*.log; fi; \
	exit $$status

## Benchmarks (most need the test bed): each figure against the bare Slurm command measured in the same
## run; the benches with aims again in rounds on the idle and on a loaded machine (benches/rounds:
## SLURM_RUN_BENCH_ROUNDS, SLURM_RUN_BENCH_HOGS); then bench-report writes BENCHMARKS.md and its plot
## (docs/benchmarks-poll.svg) from their figures, each with its spread
## (SLURM_RUN_BENCH_BEFORE=<results folder of a run on older code> adds a column of the figures then).
bench: testbed-up
	$(TESTBED_ENV) && benches/rounds

## The soak (the `soak` test binary): a few hundred small jobs under connection kills and lost answers,
## then exactly-once and consistency checks (SLURM_RUN_SOAK_JOBS, SLURM_RUN_SOAK_SECONDS bound it;
## default 300 / 600 s).
soak: testbed-up
	$(TESTBED_ENV) && cargo test --features soak --test soak -- --nocapture

## The house checks CI runs before the tests: formatting, clippy and rustdoc, every warning an error.
lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets --all-features -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --all-features
