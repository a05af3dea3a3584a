VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: install run test lint fix typecheck bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/mnemo run

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy core memory reflector migrations bots

fix: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(STAMP)
	$(VENV)/bin/mnemo bench memory --n 10000
	$(VENV)/bin/mnemo bench locomo ../shared/data/locomo/dev.json
	$(VENV)/bin/mnemo bench reflector
	$(VENV)/bin/mnemo bench prefix
	$(VENV)/bin/mnemo bench longrun

clean:
	rm -rf $(VENV)
