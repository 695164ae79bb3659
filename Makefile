# Two commands do all set-up on a fresh Linux machine with Python 3.11:
#   make demo   - create .venv, install, run the default trial/sweep on the embedded dataset
#   make test   - create .venv, install, run the whole test suite
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
# CPU build of torch; a GPU user sets TORCH_SPEC (see README) before the first `make`.
TORCH_SPEC ?= torch==2.13.0
STAMP  := $(VENV)/.installed

.PHONY: demo test install lint docs clean

$(STAMP): pyproject.toml Makefile
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (set PYTHON=...)"; exit 2; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	RAY_USAGE_STATS_ENABLED=0 $(PY) sweep.py --space search_spaces/smoke.yaml

# Two test processes, one test file each at a time (its module fixtures built once),
# longest first (tests/file_order.py): the suite is sized for 2 cores (tests/conftest.py:
# one torch thread per process).
test: $(STAMP)
	RAY_USAGE_STATS_ENABLED=0 $(PY) -m pytest -q -n 2 --dist loadfile

lint: $(STAMP)
	$(VENV)/bin/ruff check .

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) .pytest_cache
