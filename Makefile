# Two commands: `make run` and `make test`. Both set up .venv and the JVM packages first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONF ?= conf/local.yml

export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: setup run test test-setup debian-packages lint clean browser postgres mariadb bench crash-drill kafka demo-kafka

setup: $(STAMP)

# pyproject.toml declares ranges (the wheel is installed on Databricks); constraints.txt holds the
# exact version of every package, transitive ones included, so every setup is the same environment.
CONSTRAINTS := constraints.txt

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip -c $(CONSTRAINTS)
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[dev]'
	$(BIN)/python -m cdc_medallion.jars  # Delta Lake, Spark's Kafka and Avro jars from Maven Central, cached
	$(BIN)/python -m cdc_medallion.class_archive  # the driver JVM's classes, archived once (a quarter off a cold start's CPU)
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/cdc-medallion run --conf $(CONF)
	$(BIN)/cdc-medallion status --conf $(CONF)

test: test-setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 3 --dist loadgroup --durations=15

# The Python environment and the Debian packages are set up side by side (pip and apt share no
# lock): on a fresh machine setup takes the longer of the two, not their sum.
test-setup:
	@$(MAKE) --no-print-directory -j2 $(STAMP) debian-packages

# Debian packages some tests drive, each installed only when missing, all in one apt call:
# - chromium: the quality report's browser test;
# - postgresql: the Debezium capture test runs PostgreSQL 15 in a cluster of its own (a temporary
#   folder, a free port), so the package's system cluster is not created (createcluster.d) and,
#   unless a policy-rc.d is already there, no service is started.
# - mariadb-server: the MariaDB capture test runs mariadbd on a data folder of its own (a temporary
#   folder, a free port); the policy-rc.d below keeps the package's own server from starting.
# Where they cannot be installed (not root, no apt), the tests that need them skip and say why.
DEBIAN_PACKAGES ?= chromium postgresql mariadb-server
PG_BIN := /usr/lib/postgresql/15/bin
MARIADBD := /usr/sbin/mariadbd
POLICY_RC := /usr/sbin/policy-rc.d
debian-packages:
	@missing=; for package in $(DEBIAN_PACKAGES); do case $$package in \
	  chromium) test -x /usr/bin/chromium || missing="$$missing chromium";; \
	  postgresql) test -x $(PG_BIN)/postgres || missing="$$missing postgresql";; \
	  mariadb-server) test -x $(MARIADBD) || missing="$$missing mariadb-server";; esac; done; \
	[ -z "$$missing" ] || { \
	  (apt-get update -qq && mkdir -p /etc/postgresql-common/createcluster.d \
	   && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/cdc-medallion.conf || exit 1; \
	   made=; if [ ! -e $(POLICY_RC) ]; then printf '#!/bin/sh\nexit 101\n' > $(POLICY_RC) && chmod +x $(POLICY_RC) && made=1; fi; \
	   DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; status=$$?; \
	   [ -z "$$made" ] || rm -f $(POLICY_RC); exit $$status) >/dev/null 2>&1 \
	  || echo "could not install$$missing: the tests that need it will skip and say why"; }

browser:
	@$(MAKE) --no-print-directory debian-packages DEBIAN_PACKAGES=chromium

postgres:
	@$(MAKE) --no-print-directory debian-packages DEBIAN_PACKAGES=postgresql

mariadb:
	@$(MAKE) --no-print-directory debian-packages DEBIAN_PACKAGES=mariadb-server

# Benchmarks (not tests; nothing asserts a time). BENCH_N changes per format, default 1,000,000;
# BENCH_FORMATS, BENCH_PARTS and BENCH_10M=1 narrow or widen it (bench/run.py). PyFlink, the peer,
# is installed on first use into bench/.flink-venv (its pins conflict with ours).
BENCH_N ?= 1000000
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	BENCH_N=$(BENCH_N) $(BIN)/python -m bench

# The kill drill at scale: ingest SIGKILLed in every run over ~300k messages.
crash-drill: $(STAMP)
	$(BIN)/python -m bench.crash

# A single-node Kafka broker (KRaft) from Maven Central jars on localhost:$(KAFKA_PORT), in the
# foreground until Ctrl-C; KAFKA_DATA keeps its topics across restarts (default: a temporary folder).
KAFKA_PORT ?= 9092
kafka: $(STAMP)
	$(BIN)/python -m cdc_medallion.services.kafka_broker --port $(KAFKA_PORT) $(if $(KAFKA_DATA),--data $(KAFKA_DATA))

# The quickstart on live CDC: a broker, PostgreSQL and Debezium, a short workload, the pipeline
# from Kafka, `status` and the report, gold compared with the database; everything it starts is stopped.
demo-kafka: $(STAMP) postgres
	$(BIN)/python -m cdc_medallion.demo_kafka

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf .data build dist *.egg-info
