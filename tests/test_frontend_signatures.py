"""ringccl.torch and ringccl.mpi take the same arguments in the same order.

Both are the same flow (:mod:`ringccl.frontend`) over two backends, so their signatures may
differ only by the documented renaming of torch.distributed's names to MPI's:

============================ ============== =======================================
ringccl.torch                ringccl.mpi    why
============================ ============== =======================================
all_reduce                   all_reduce
reduce_scatter_tensor        reduce_scatter MPI_Reduce_scatter_block takes one array
all_gather_into_tensor       all_gather     MPI_Allgather takes one array
broadcast, reduce            same
scatter, gather              same
all_to_all_single            all_to_all     MPI_Alltoall(v) on one array
run_schedule                 run_schedule
tensor                       buffer         arrays are "buffers" in MPI
group                        comm           process group ↔ communicator
output_tensor, input_tensor  output, input
============================ ============== =======================================

and one documented default: torch.distributed's ``broadcast`` and ``reduce`` require ``src`` /
``dst``; MPI's root defaults to 0. Everything else (names, order, kinds, defaults, the
keyword-only options ``segment_bytes``, ``timeout``, ``restore``, ``check``) must match.
Compared without importing torch or mpi4py's MPI where they are missing: the signatures are
read from the source with ``ast``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "ringccl"

FUNCTIONS = {"all_reduce": "all_reduce", "reduce_scatter_tensor": "reduce_scatter",
             "all_gather_into_tensor": "all_gather", "broadcast": "broadcast",
             "reduce": "reduce", "scatter": "scatter", "gather": "gather",
             "all_to_all_single": "all_to_all", "run_schedule": "run_schedule"}
ARGUMENTS = {"tensor": "buffer", "group": "comm", "output_tensor": "output",
             "input_tensor": "input"}
# (torch function, argument): torch's default, MPI's default
DEFAULTS = {("broadcast", "src"): (None, "0"), ("reduce", "dst"): (None, "0")}
#: ``transport`` ("auto", "shm", "p2p") is common to both since ringccl.mpi runs over
#: shared memory too
OPTIONS = ["segment_bytes", "timeout", "restore", "check", "transport"]
#: options only ringccl.torch has, after the common ones (none at present)
TORCH_ONLY: list = []


def _signatures(path: Path) -> dict:
    """name -> [(kind, argument, default source or None)] of the module's top-level functions."""
    tree = ast.parse(path.read_text())
    out = {}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        a = node.args
        positional = a.posonlyargs + a.args
        defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
        params = [("positional", p.arg, None if d is None else ast.unparse(d))
                  for p, d in zip(positional, defaults)]
        params += [("keyword", p.arg, None if d is None else ast.unparse(d))
                   for p, d in zip(a.kwonlyargs, a.kw_defaults)]
        if a.vararg:
            params.append(("*args", a.vararg.arg, None))
        if a.kwarg:
            params.append(("**kwargs", a.kwarg.arg, None))
        out[node.name] = params
    return out


TORCH = _signatures(SRC / "backends" / "torch" / "collectives.py")
MPI = _signatures(SRC / "backends" / "mpi" / "collectives.py")


def _as_mpi(torch_name: str, params: list) -> list:
    """torch's parameters with the documented renaming and default differences applied."""
    out = []
    for kind, name, default in params:
        if kind == "keyword" and name in TORCH_ONLY:
            continue
        want = DEFAULTS.get((torch_name, name))
        if want is not None:
            assert default == want[0], (torch_name, name, default)
            default = want[1]
        out.append((kind, ARGUMENTS.get(name, name), default))
    return out


@pytest.mark.parametrize("torch_name", sorted(FUNCTIONS))
def test_signatures_match_under_the_documented_renaming(torch_name):
    mpi_name = FUNCTIONS[torch_name]
    assert torch_name in TORCH, f"ringccl.torch has no {torch_name}"
    assert mpi_name in MPI, f"ringccl.mpi has no {mpi_name}"
    assert _as_mpi(torch_name, TORCH[torch_name]) == MPI[mpi_name], (
        f"ringccl.torch.{torch_name} and ringccl.mpi.{mpi_name} drifted apart")


@pytest.mark.parametrize("torch_name", sorted(set(FUNCTIONS) - {"run_schedule"}))
def test_every_collective_takes_the_options_keyword_only_in_order(torch_name):
    keywords = [name for kind, name, _ in TORCH[torch_name] if kind == "keyword"]
    assert keywords == OPTIONS + TORCH_ONLY
    assert TORCH[torch_name][-1][0] == "**kwargs"  # the algorithm's parameters


def test_a_drifted_signature_is_caught():
    drifted = [(k, n, d) for k, n, d in MPI["all_reduce"] if n != "timeout"]
    assert _as_mpi("all_reduce", TORCH["all_reduce"]) != drifted
