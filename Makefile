# Everything runs inside .venv, created on first use from the system Python.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export NUMBA_CACHE_DIR ?= $(CURDIR)/.numba_cache

.PHONY: demo test venv docs bench zoo clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m compiler.demos.demo
	$(BIN)/python -m compiler.demos.dynamic_demo

# Two workers (pytest-xdist, one per core of the CI machine); `pytest` alone runs serially.
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadscope

docs: $(STAMP)
	$(BIN)/python -m isa_spec.docgen

bench: $(STAMP)
	$(BIN)/python benchmarks/assembler.py
	$(BIN)/python benchmarks/simulator.py
	$(BIN)/python benchmarks/resnet50.py
	$(BIN)/python benchmarks/models.py

# The model zoo (benchmarks/zoo.py): its frameworks are a separate, large extra; models cached outside the repo.
zoo: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[zoo]'
	$(BIN)/python benchmarks/zoo.py

clean:
	rm -rf $(VENV) .numba_cache build *.egg-info
