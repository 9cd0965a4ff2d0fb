# Two commands: `make run` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONF ?= conf/local.yml

export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: setup run test lint clean browser

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/cdc-medallion run --conf $(CONF)
	$(BIN)/cdc-medallion status --conf $(CONF)

test: $(STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

# The quality report's browser test drives Debian's Chromium. Installed only when missing; where it
# cannot be (not root, no apt), the test skips and says why.
browser:
	@test -x /usr/bin/chromium || { \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
	  || echo "chromium could not be installed: the browser test will skip"; }

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf .data build *.egg-info
