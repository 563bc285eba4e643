#!/usr/bin/env bash
# Install what `ringccl.mpi` and its tests need: Open MPI from Debian packages and mpi4py into the
# given Python environment. Idempotent: does nothing that is already done. Used by `make test`.
#
#   scripts/install_mpi.sh [PYTHON]      (default: .venv/bin/python, else python3)
#
# Needs root (or sudo) for apt-get; without either it says so and leaves MPI out (the MPI tests
# then skip with that reason).
set -euo pipefail

PYTHON="${1:-}"
if [ -z "$PYTHON" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

# mpirun to start processes; mpicc (libopenmpi-dev) in case pip must build mpi4py from source
if ! command -v mpirun >/dev/null 2>&1 || ! command -v mpicc >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
            echo "install_mpi.sh: not root and no sudo: skipping Open MPI (MPI tests will skip)" >&2
            exit 0
        fi
    fi
    if command -v apt-get >/dev/null 2>&1; then
        # ~90 Debian packages (Open MPI and its dependencies): quiet unless it fails
        echo "install_mpi.sh: installing Open MPI (Debian packages openmpi-bin libopenmpi-dev)" >&2
        log=$(mktemp)
        if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install \
                -y -qq openmpi-bin libopenmpi-dev; } >"$log" 2>&1; then
            cat "$log" >&2
            rm -f "$log"
            echo "install_mpi.sh: apt-get failed (output above)" >&2
            exit 1
        fi
        rm -f "$log"
    else
        echo "install_mpi.sh: no apt-get: install Open MPI or MPICH yourself (MPI tests will skip)" >&2
        exit 0
    fi
fi

if ! "$PYTHON" -c "import mpi4py" >/dev/null 2>&1; then
    "$PYTHON" -m pip install --quiet "mpi4py>=3.1"
fi
"$PYTHON" -c "import mpi4py; print('mpi4py', mpi4py.__version__)"
mpirun --version | head -n 1
