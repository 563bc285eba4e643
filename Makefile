# The two commands of the README. Each creates .venv and installs everything it needs first.
#   make demo   -> the guided tour (ringccl demo)
#   make test   -> the whole test suite (what .ci/run runs); also installs Open MPI (Debian
#                  packages openmpi-bin libopenmpi-dev, as root) and mpi4py for the MPI tests,
#                  and Chromium (chromium chromium-driver) for the browser tests
#   make screenshots -> docs/explore-*.png from the explorer pages (headless Chromium)
# torch: our machines install the CPU wheel torch==2.13.0 from local disk; elsewhere any
# torch >= 2.4 works: `make test TORCH='torch>=2.4'`.

PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
BIN    := $(VENV)/bin

.PHONY: demo test bench screenshots clean

$(VENV)/.installed: pyproject.toml setup.py src/ringccl/backends/shm/_lanec.c \
		src/ringccl/backends/shm/_lanec_loop.c src/ringccl/backends/shm/_lanec_data.c \
		src/ringccl/backends/shm/_lanec.h Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[torch,dev]"
	touch $@

demo: $(VENV)/.installed
	$(BIN)/ringccl demo

test: $(VENV)/.installed
	bash scripts/install_mpi.sh $(BIN)/python
	bash scripts/install_browser.sh
	$(BIN)/python -m pytest -n 2 --durations=15

screenshots: $(VENV)/.installed
	bash scripts/install_browser.sh
	$(BIN)/python scripts/screenshots.py

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/bench_sim.py
	$(BIN)/python benchmarks/bench_torch_ring.py
	$(BIN)/python benchmarks/bench_algorithms.py
	$(BIN)/python benchmarks/bench_cost.py
	$(BIN)/python benchmarks/bench_train_overlap.py
	$(BIN)/python benchmarks/bench_vs_builtin.py
	$(BIN)/python benchmarks/bench_mpi.py
	$(BIN)/python benchmarks/bench_fit.py
	$(BIN)/python benchmarks/bench_memory.py
	$(BIN)/python benchmarks/fuzz_sim.py --examples 10000
	$(BIN)/python benchmarks/fault_injection.py --trials 60

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
