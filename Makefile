# hpcbench: `make demo` and `make test` set everything up on first use.
# The venv is rebuilt when pyproject.toml or constraints.txt change.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.hpcbench-installed
# Timestamped so that a second `make demo` never overwrites the first run's results.
DEMO_RUN := results/demo-$(shell date +%Y%m%d-%H%M%S)

.PHONY: setup test test-census demo reproduce reproduce-regime rehearse bench bench-cluster gpu-check gpu-suite clean-venv help

help:
	@echo "make setup   create $(VENV) with the pinned packages and register its Jupyter kernel"
	@echo "make demo    run the demo suite on this machine and write reports/demo/index.html"
	@echo "make reproduce  (root) verdicts from the emulated SLURM cluster: reports/reproduce/index.html (~80 min on 2 cores)"
	@echo "make reproduce-regime  (root) only the regime-matched entries (C2, C3, C7, C8): reports/reproduce-regime/ (~30 min)"
	@echo "make rehearse  (root) the guide-scale suite at toy size on the emulated cluster with stand-in GPUs as GRES: reports/rehearsal/"
	@echo "make test    run the whole test suite (set HPCBENCH_REQUIRE_INTEGRATION=1 to forbid skips)"
	@echo "make test-census   make test, recording each test's wall and CPU time; prints them per file"
	@echo "make bench   run the benchmarks (ratios measured side by side, not tests)"
	@echo "make bench-cluster   the benchmarks on the emulated SLURM cluster (root)"
	@echo "make gpu-check   every CUDA/NCCL path of one GPU, as a pass/fail table (no GPU: says so, exit 0)"
	@echo "make gpu-suite   the world-size-1 experiments on one GPU through their notebooks: reports/gpu/ (no GPU: refused)"

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,hub]'
	# Register the venv's kernel inside the venv (--sys-prefix) under its own name, which every
	# notebook asks for: papermill, JupyterLab and JupyterHub's servers then run this interpreter,
	# never a `python3` from ~/.local or from a hub's own environment that lacks hpcbench.
	$(PY) -m ipykernel install --sys-prefix --name hpcbench --display-name "hpcbench (Python 3)"
	touch $(STAMP)

setup: $(STAMP)

# Two pytest sessions side by side: the tests on the emulated cluster (which wait on SLURM and timed
# phases) beside the local ones (tests/lanes.py); each lane's whole output lands in results/test-lanes/.
test: setup
	$(PY) tests/lanes.py -ra --durations=15 tests

# The same run, with each test's wall and CPU time recorded (tests/conftest.py) and summed per file.
test-census: setup
	mkdir -p results; HPCBENCH_TEST_CENSUS=results/test-census.json $(PY) -m pytest -ra --durations=15 tests; \
	  status=$$?; $(PY) tests/census_report.py results/test-census.json; exit $$status

# --report writes the report when the run ends (also after a failed task, which it lists) and prints
# its path; the exit status is the run's (1 when a task failed), or 2 when the report cannot be written.
demo: setup
	@$(VENV)/bin/hpcbench suite demo --run-dir $(DEMO_RUN) --jobs 2 --report reports/demo

# Root, slurm-wlm and munge: brings the emulated cluster up, calibrates its link to the guide's
# inter/intra-node bandwidth ratio (NICS InfiniBand NICs per 8-GPU node), runs the reproduce suite
# (5 launches of every experiment) and takes the cluster down again.
# `make reproduce REPRODUCE_ARGS="--resume results/reproduce-..."` reruns only what failed, on the same link.
NICS ?= 8
REPRODUCE_ARGS ?=
reproduce: setup
	$(VENV)/bin/hpcbench reproduce --nics $(NICS) --report reports/reproduce $(REPRODUCE_ARGS)

# Root, slurm-wlm and munge: the dress rehearsal of the guide-scale suite before GPU hours. An emulated 2-node
# cluster declares 8 stand-in GPUs per node as SLURM GRES; every task runs once at its toy size on 2 x 2 ranks
# (gloo on CPU stand-ins), each rank placed by the plan of a recorded DGX-like node: reports/rehearsal/.
REHEARSAL_STATE := /tmp/hpcbench-rehearsal
rehearse: setup
	$(VENV)/bin/hpcbench cluster up --nodes 2 --gpus-per-node 8 --state $(REHEARSAL_STATE)
	SLURM_CONF=$(REHEARSAL_STATE)/slurm.conf HPCBENCH_TOPOLOGY_ROOT=$(CURDIR)/tests/fixtures/topology/two_socket_8gpu_4nic \
	  $(VENV)/bin/hpcbench suite guide-scale --layout 2x2 --toy --backend slurm --gres gpu:2 --oversubscribe \
	  --report reports/rehearsal; status=$$?; \
	  $(VENV)/bin/hpcbench cluster down --state $(REHEARSAL_STATE); exit $$status

# Only the entries calibrated to the guide's regime (C2, C3, C7, C8: regime or link_regime guide): ~30 min.
reproduce-regime: setup
	$(VENV)/bin/hpcbench reproduce --nics $(NICS) --only regime --report reports/reproduce-regime $(REPRODUCE_ARGS)

# An experiment's own benchmark is its package's bench module; hpcbench/bench/ holds the shared machinery's.
bench: setup
	$(VENV)/bin/hpcbench bench collectives
	$(VENV)/bin/hpcbench bench io-formats
	$(VENV)/bin/hpcbench bench fault-tolerance
	$(VENV)/bin/hpcbench bench hdf5-reads
	$(VENV)/bin/hpcbench bench shard-reads
	$(VENV)/bin/hpcbench bench sampler-overhead
	$(VENV)/bin/hpcbench bench train-step

# Root, slurm-wlm and munge: these bring up the emulated cluster and take it down again.
bench-cluster: setup
	$(VENV)/bin/hpcbench bench slurm-cluster --link-rate 1gbit
	$(VENV)/bin/hpcbench bench comm-modes --link-rate 1gbit
	$(VENV)/bin/hpcbench bench gradient-compression --link-rate 200mbit
	$(VENV)/bin/hpcbench bench weather-case --link-rate 100mbit

# One GPU, a few minutes: training throughput + MFU, the CUDA prefetcher, NCCL at world size 1,
# CUDA memory as records. Exit 1 if a check failed; without a GPU it says so and exits 0.
gpu-check: setup
	$(VENV)/bin/hpcbench gpu-check --out results/gpu-check

# The GPU suite (hpcbench/suites/gpu.yaml): every experiment that runs at world size 1 on one CUDA device,
# through its notebook, and its report. Without a GPU the limits refuse it before anything starts.
gpu-suite: setup
	$(VENV)/bin/hpcbench suite gpu --report reports/gpu

clean-venv:
	rm -rf $(VENV)
