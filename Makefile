# The commands people run. `make demo` and `make test` are the README's first two commands.
CARGO ?= cargo

.PHONY: demo test test-unit lint fmt services-up services-down bench bench-hbase bench-flink bench-hbase-java bench-profile-java fuzz soak soak-serve

## Build, generate two hours of traffic for 500 sensors, replay it into ./hourglass-data, query it.
demo:
	scripts/demo.sh

# Services `make test` starts before the tests (`scripts/services.sh up` is idempotent and
# waits until they answer). The HBase tests fail, not skip, when HBase is down.
TEST_SERVICES ?= all

## Every test: unit, property, doc, end-to-end, against the live services (started here) and
## with real clients (Chromium, the Prometheus API client; installed here when missing).
test:
	scripts/services.sh up $(TEST_SERVICES)
	scripts/test-tools.sh
	$(CARGO) test --workspace --locked

## The tests that need no service and no client tool (the others are skipped; not in CI).
test-unit:
	HOURGLASS_SKIP_HBASE=1 HOURGLASS_SKIP_CLIENTS=1 $(CARGO) test --workspace --locked

## Formatting and clippy, as CI would.
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

fmt:
	$(CARGO) fmt --all

## Standalone HBase (Thrift1 :9090, Thrift2 :9091) and KRaft Kafka (:9092) from Maven Central;
## MariaDB (:3306) and Redis (:6379) from Debian packages.
services-up:
	scripts/services.sh up all

services-down:
	scripts/services.sh down all

## Replay throughput into the embedded store; the JSON result names the command that made it.
bench:
	$(CARGO) run --release --locked -p hourglass-jobs -- bench replay --devices 10000 --duration 1h --json target/bench-replay.json

## Replay throughput into the live HBase: 10,000 devices x 10 min, with the write batch sizes used.
bench-hbase:
	scripts/services.sh up hbase
	$(CARGO) run --release --locked -p hourglass-jobs -- bench replay --devices 10000 --duration 10m --hbase 127.0.0.1:9090 --json target/bench-replay-hbase.json

## hourglass replay vs the Flink peer job (bench/flink) on the same recordings, interleaved:
## readings/s, CPU seconds, their ratios, the load seen, and both systems' counts.
bench-flink:
	bench/flink/run.sh

## hourglass replay --hbase vs the Java HBase client (bench/hbase-java) writing the same rows,
## interleaved, tables truncated between runs: readings/s, writer / HBase / Thrift CPU seconds,
## their ratios, and a digest showing both leave the same tables. Empties the hourglass tables.
bench-hbase-java:
	scripts/services.sh up hbase
	bench/hbase-java/run.sh

# Flags of bench/profile-java/run.sh, e.g. PROFILE_JAVA_ARGS="--users 20000 --events 200000".
PROFILE_JAVA_ARGS ?=

## hourglass profile replay --hbase vs its Java peer (bench/profile-java: per-user merge, 500
## users or 5 s per flush, BufferedMutator) on the same tag events, 1M users x 20M events by
## default, interleaved, tables truncated between runs: events/s, writer / HBase / Thrift CPU
## seconds, their ratios, and a digest showing both leave the same tables. Empties the profile
## tables.
bench-profile-java:
	scripts/services.sh up hbase
	bench/profile-java/run.sh $(PROFILE_JAVA_ARGS)

# Seconds per fuzz target, and the address-space cap (KiB) under which a huge allocation is an
# abort naming its size rather than the machine running out of memory.
FUZZ_SECS ?= 1800
FUZZ_MEM_KB ?= 8000000
FUZZ_TARGETS = fuzz::decode::decoder fuzz::keys::key_codecs fuzz::prom::promql fuzz::http::http

## Every fuzz target for FUZZ_SECS seconds each (release, overflow checks on), one process per
## target so an abort stops only its own; prints executions per target. See docs/RELIABILITY.md.
fuzz: export CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS = true
fuzz:
	$(CARGO) test --release --locked -p hourglass-sensor --no-run
	@status=0; for t in $(FUZZ_TARGETS); do \
	  ( ulimit -v $(FUZZ_MEM_KB); HOURGLASS_FUZZ_SECS=$(FUZZ_SECS) \
	    $(CARGO) test --release --locked -p hourglass-sensor $$t -- --exact --include-ignored --nocapture ) \
	    || { status=1; echo "fuzz: $$t FAILED (above)"; }; \
	done; exit $$status

# The services script of the checkout that started the shared broker (the broker soak restarts it).
SERVICES_SH ?= $(CURDIR)/scripts/services.sh

## Soak runs against the live HBase and Kafka (about an hour; the last restarts the Kafka
## broker once): SIGKILL x20 into HBase, HBase down 10 min at 10,000 readings/s (release build),
## broker restart; the profile job SIGKILLed x20 into HBase (tests/tests/profile_crash.rs);
## then soak-serve. Prints the figures docs/RELIABILITY.md records.
soak:
	$(SERVICES_SH) up all
	HOURGLASS_SERVICES_SH=$(SERVICES_SH) $(CARGO) test --locked -p hourglass-tests --test soak -- --ignored --nocapture --test-threads 1
	$(CARGO) test --locked -p hourglass-tests --test profile_crash -- --ignored --nocapture --test-threads 1
	$(MAKE) soak-serve

## `hourglass serve` on loopback (no service needed, ~3 min): 1,000 clients trickling their
## headers beside normal requests, and 200 concurrent curve clients; p99, failures, RSS growth.
soak-serve:
	$(CARGO) test --locked -p hourglass-tests --test serve_soak -- --ignored --nocapture --test-threads 1
