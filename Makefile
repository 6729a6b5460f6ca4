# The commands people run. `make demo` and `make test` are the README's first two commands.
CARGO ?= cargo

.PHONY: demo test lint fmt services-up services-down bench

## Build, generate two hours of traffic for 1,000 sensors, replay it into ./hourglass-data, query it.
demo:
	scripts/demo.sh

## Every test: unit, property, doc and end-to-end.
test:
	$(CARGO) test --workspace --locked

## Formatting and clippy, as CI would.
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

fmt:
	$(CARGO) fmt --all

## Standalone HBase (Thrift1 :9090, Thrift2 :9091) and KRaft Kafka (:9092) from Maven Central.
services-up:
	scripts/services.sh up all

services-down:
	scripts/services.sh down all

## Replay throughput into the embedded store; the JSON result names the command that made it.
bench:
	$(CARGO) run --release --locked -p hourglass-jobs -- bench replay --devices 10000 --duration 1h --json target/bench-replay.json
