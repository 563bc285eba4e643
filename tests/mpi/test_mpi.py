"""ringccl.mpi and ``ringccl bench --backend mpi`` on 1–4 local MPI processes.

Skipped, with the reason, where mpirun or mpi4py is missing (scripts/install_mpi.sh installs
both). The processes are started with ringccl.mpi.launch.mpirun_command (Open MPI gets
--oversubscribe, and --allow-run-as-root when run as root).
"""

import importlib.util
import json
import os
import shutil
import sys

import pytest

if shutil.which("mpirun") is None and shutil.which("mpiexec") is None:
    pytest.skip("no mpirun/mpiexec on PATH (run scripts/install_mpi.sh)", allow_module_level=True)
if importlib.util.find_spec("mpi4py") is None:
    pytest.skip("mpi4py is not installed (pip install 'ringccl[mpi]')", allow_module_level=True)

import ringccl  # noqa: E402
from ringccl.cli import main  # noqa: E402
from ringccl.backends.mpi.launch import mpirun_command  # noqa: E402

from .. import bounds  # noqa: E402
from . import mpirun  # noqa: E402

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(bounds.job(600))]


@pytest.mark.parametrize("nproc", [1, 2, 3])
def test_collectives_match_numpy_and_mpi(nproc):
    proc = mpirun.run(nproc, mpirun.python("mpi_script.py"), seconds=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": OK") == nproc


@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_primitives_match_mpi_collectives(nproc):
    """broadcast, reduce, scatter, gather, all_to_all: every algorithm against MPI_Bcast,
    MPI_Reduce, MPI_Scatter, MPI_Gather, MPI_Alltoall(v) and numpy, in one mpirun."""
    proc = mpirun.run(nproc, mpirun.python("primitives_script.py"), seconds=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": OK") == nproc


@pytest.mark.parametrize("nproc", [2, 3])
def test_aliasing_contract(nproc):
    """Every collective × algorithm × transport (p2p, shm) and form of input/output: the
    output right, nothing else changed; partial overlaps refused naming both arguments; with
    3 ranks the in-place reduce_scatter example leaves [21, 24, 3, 4, 5, 6] on rank 0."""
    proc = mpirun.run(nproc, mpirun.python("aliasing_script.py"), seconds=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": OK") == nproc, proc.stdout


def test_a_stalled_rank_times_out_and_all_gather_output_is_restored():
    # the job ends with MPI_Abort (as documented after a timeout): only the printed lines count
    proc = mpirun.run(3, mpirun.python("timeout_script.py"), seconds=120,
                      env={"RINGCCL_TIMEOUT": "2"})
    assert proc.stdout.count(": OK") == 2, proc.stdout + proc.stderr


def test_ieee_results_raise_no_numpy_warning():
    proc = mpirun.run(2, mpirun.python("ieee_warnings_script.py"), seconds=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": OK") == 2, proc.stdout + proc.stderr


def test_check_on_some_ranks_only_is_bounded_by_the_timeout():
    """ringccl.mpi's check=True on rank 0 only, timeout=3: every rank raises RingcclTimeout
    within the timeout (rank 0's check exchange was a blocking comm.allgather that hung)."""
    proc = mpirun.run(3, mpirun.python("check_some_ranks_script.py"), seconds=120)
    assert proc.stdout.count(": OK") == 3, proc.stdout + proc.stderr


def test_mpirun_command_flags():
    cmd = mpirun_command(3, ["python", "x.py"])
    assert cmd[1:3] == ["-n", "3"] and cmd[-2:] == ["python", "x.py"]
    if "--oversubscribe" in cmd:  # Open MPI
        assert ("--allow-run-as-root" in cmd) == (os.geteuid() == 0)


def test_bench_json_then_fit(tmp_path, capsys):
    """The issue's acceptance pipeline, on a short sweep."""
    assert main(["bench", "all_reduce", "--backend", "mpi", "--nproc", "2", "-b", "4KiB",
                 "-e", "1MiB", "-f", "4", "--iters", "5", "-w", "1", "--algorithm", "ring,builtin",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = report["rows"]
    assert report["world_size"] == 2 and report["spec"]["backend"] == "mpi"
    coll = [r for r in rows if r["kind"] == "collective"]
    assert {(r["algorithm"], r["placement"]) for r in coll} == {
        (a, p) for a in ("ring", "builtin") for p in ("out-of-place", "in-place")}
    assert len(coll) == 4 * 5 and all(r["wrong"] == 0 for r in coll)  # 4 KiB … 1 MiB
    assert all(r["busbw"] == pytest.approx(r["algbw"]) for r in coll)  # 2(N-1)/N = 1 at N=2
    assert len([r for r in rows if r["kind"] == "local-reduce"]) == 5
    path = tmp_path / "b.json"
    path.write_text(json.dumps(report))
    assert main(["fit", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for text in ("α (per step)", "β (per byte sent)", "γ (per byte reduced)", "R² =",
                 "held out:", "held-out median |error|"):
        assert text in out


@pytest.mark.parametrize("collective,dtype,op", [("reduce_scatter", "int32", "max"),
                                                ("all_gather", "int8", None)])
def test_bench_other_collectives_nccl_tests_format(capsys, collective, dtype, op):
    assert main(["bench", collective, "--backend", "mpi", "--nproc", "3", "-b", "1KiB",
                 "-e", "16KiB", "-f", "4", "--iters", "2", "-w", "0", "-d", dtype,
                 *(["-o", op] if op else []),   # -o is refused where nothing reduces
                 "--segment-bytes", "auto,0,1KiB", "--format", "nccl-tests"]) == 0
    lines = capsys.readouterr().out.splitlines()
    data = [line.split() for line in lines if line and not line.startswith("#")]
    # --algorithm defaults to every registered algorithm (each with 3 segment settings) + builtin
    assert len(data) == 3 * (3 * len(ringccl.algorithms(collective)) + 1)
    assert all(len(f) == 13 and f[8] == "0" and f[12] == "0" for f in data)
    assert {f[3] for f in data} == {op if collective == "reduce_scatter" else "none"}
    assert "# ringccl algorithm: ring seg=1KiB (segment_bytes 1024)" in lines


@pytest.mark.parametrize("collective,extra", [
    ("broadcast", ["--root", "1", "-d", "float64"]),
    ("reduce", ["--root", "2", "-o", "max", "-d", "int32"]),
    ("scatter", ["--root", "1", "-d", "bool"]),
    ("gather", ["--root", "2"]),
    ("all_to_all", ["-d", "int8"]),
])
def test_bench_rooted_and_all_to_all(capsys, collective, extra):
    """Every algorithm and MPI's own (MPI_Bcast, MPI_Reduce, MPI_Scatter, MPI_Gather,
    MPI_Alltoall), both placements, checked against the exact result."""
    assert main(["bench", collective, "--backend", "mpi", "--nproc", "3", "-b", "96",
                 "-e", "6KiB", "-f", "8", "--iters", "1", "-w", "0", "--csv", *extra]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    rows = [dict(zip(lines[0].split(","), line.split(","))) for line in lines[1:]]
    coll = [r for r in rows if r["kind"] == "collective"]
    algorithms = ringccl.algorithms(collective) + ["builtin"]
    assert {(r["algorithm"], r["placement"]) for r in coll} == {
        (a, p) for a in algorithms for p in ("out-of-place", "in-place")}
    assert len(coll) == 3 * 2 * len(algorithms) and all(r["wrong"] == "0" for r in coll)


def test_bench_under_mpirun_prints_once():
    """`mpirun -n 2 ringccl bench --backend mpi`: the processes run the sweep, rank 0 prints."""
    proc = mpirun.run(2, [sys.executable, "-m", "ringccl", "bench", "all_gather", "--backend",
                          "mpi", "-b", "4KiB", "-e", "4KiB", "--iters", "2", "-w", "0", "--csv"],
                      seconds=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    rows = 2 * (len(ringccl.algorithms("all_gather")) + 1)  # (algorithms + builtin) × placements
    assert lines[0].startswith("collective,backend,world_size") and len(lines) == 1 + rows


def test_bench_failure_is_reported(capsys):
    # the command refuses float16 for MPI's builtin before mpirun starts ...
    code = main(["bench", "all_reduce", "--backend", "mpi", "--nproc", "2", "-b", "1KiB",
                 "-e", "1KiB", "--iters", "1", "-d", "float16", "--algorithm", "builtin"])
    assert code == 2
    assert "MPI's builtin collective does not take float16" in capsys.readouterr().err
    # ... and the launcher reports the rank that fails on it, in one line
    from ringccl.backends.mpi.launch import launch_bench
    from ringccl.bench import BUILTIN, BenchSpec
    from ringccl.errors import WorkerError
    spec = BenchSpec("all_reduce", (BUILTIN,), 1024, 1024, 2, 1, 0, True, "float16",
                     backend="mpi", calibrate=False)
    with pytest.raises(WorkerError, match="no predefined datatype for float16"):
        launch_bench(spec, 2, timeout=300)
