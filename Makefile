# hpcbench: `make demo` and `make test` set everything up on first use.
# The venv is rebuilt when pyproject.toml or constraints.txt change.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.hpcbench-installed
# Timestamped so that a second `make demo` never overwrites the first run's results.
DEMO_RUN := results/demo-$(shell date +%Y%m%d-%H%M%S)

.PHONY: setup test demo bench bench-cluster clean-venv help

help:
	@echo "make setup   create $(VENV) with the pinned packages and register its Jupyter kernel"
	@echo "make demo    run the demo suite on this machine and write reports/demo/index.html"
	@echo "make test    run the whole test suite (set HPCBENCH_REQUIRE_INTEGRATION=1 to forbid skips)"
	@echo "make bench   run the benchmarks (ratios measured side by side, not tests)"
	@echo "make bench-cluster   the benchmarks on the emulated SLURM cluster (root)"

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	# Register the venv's kernel inside the venv (--sys-prefix), so papermill's
	# `python3` kernel is this interpreter and not whatever ~/.local points to.
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (hpcbench)"
	touch $(STAMP)

setup: $(STAMP)

test: setup
	$(PY) -m pytest -ra tests

demo: setup
	@$(VENV)/bin/hpcbench suite demo --run-dir $(DEMO_RUN); status=$$?; \
	$(VENV)/bin/hpcbench report $(DEMO_RUN) --out reports/demo || exit $$?; \
	exit $$status

bench: setup
	$(PY) -m hpcbench.bench.collectives_overhead
	$(PY) -m hpcbench.bench.io_formats

# Root, slurm-wlm and munge: these bring up the emulated cluster and take it down again.
bench-cluster: setup
	$(PY) -m hpcbench.bench.slurm_cluster --link-rate 1gbit
	$(PY) -m hpcbench.bench.comm_modes --link-rate 1gbit

clean-venv:
	rm -rf $(VENV)
