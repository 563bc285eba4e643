"""The CLI on real processes: Ctrl-C ends a bench with one line, exit 130, the rows so
far and no worker left; --oversubscribe; worker failures in one line (--verbose: traceback);
piped tables whole at COLUMNS=40; no torch FutureWarning."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

pytest.importorskip("torch")
from .. import bounds  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (Linux)")

from ringccl import resources  # noqa: E402

from .safety_helpers import GONE_S, SRC, START_S, kill_all, marked, wait_for  # noqa: E402


def _ringccl(*argv: str, marker: str, **env) -> subprocess.Popen:
    """``python -m ringccl argv`` in its own session (a shell job's process group), every
    descendant marked with RINGCCL_TEST_MARKER."""
    environ = dict(os.environ, RINGCCL_TEST_MARKER=marker, **env,
                   PYTHONPATH=os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH"))
                                              if p))
    return subprocess.Popen([sys.executable, "-m", "ringccl", *argv], env=environ, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def test_ctrl_c_on_bench_reports_the_rows_so_far_in_one_line(tmp_path):
    marker = uuid.uuid4().hex
    cli = _ringccl("bench", "all_reduce", "--nproc", "2", "-b", "4KiB", "-e", "64MiB",
                   "-a", "ring,builtin", "--json", marker=marker)
    try:
        workers = wait_for(lambda: (marked(marker) - {cli.pid}) if len(
            marked(marker) - {cli.pid}) >= 2 else None, START_S)
        assert workers, "the workers did not start"
        time.sleep(3)  # let some rows be measured (how many does not matter: see below)
        os.killpg(cli.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        out, err = cli.communicate(timeout=bounds.job(120))
        assert cli.returncode == 130, (out, err)
        lines = err.splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err
        got = re.fullmatch(r"interrupted: (\d+) of (\d+) rows measured, every worker ended",
                           lines[0])
        assert got, lines
        report = json.loads(out)
        assert report["interrupted"] is True and len(report["rows"]) == int(got.group(1))
        assert int(got.group(1)) < int(got.group(2))
        left = wait_for(lambda: not {p for p in workers if p in marked(marker)}, GONE_S)
        assert left, f"workers {sorted(workers & marked(marker))} outlived the interrupt"
    finally:
        kill_all(cli, marker)


def test_oversubscribe_starts_a_modestly_oversubscribed_run():
    nproc = resources.MAX_PROCESSES_PER_CORE * resources.usable_cores() + 1
    if nproc > 9:
        pytest.skip(f"{nproc} processes are too many for a test on this machine")
    marker = uuid.uuid4().hex
    refused = _ringccl("run", "all_reduce", "--nproc", str(nproc), "-c", "64", marker=marker)
    try:
        out, err = refused.communicate(timeout=bounds.job(120))
        assert refused.returncode == 2 and "processes per core" in err and not out, err
    finally:
        kill_all(refused, marker)
    cli = _ringccl("run", "all_reduce", "--nproc", str(nproc), "-c", "64", "--iters", "1",
                   "--warmup", "0", "--oversubscribe", marker=marker)
    try:
        out, err = cli.communicate(timeout=bounds.job(600))
        assert cli.returncode == 0, err
        assert f"all_reduce on {nproc} local processes (ringccl over " in out
    finally:
        kill_all(cli, marker)


def test_a_worker_failure_is_one_line_and_verbose_gives_its_traceback(tmp_path):
    # a failure only the workers meet (everything the parent can check, it refuses before any
    # process starts): a user module, imported by the workers through RINGCCL_IMPORT, that
    # raises when it is imported in a child process
    plugin = tmp_path / "fails_in_workers.py"
    plugin.write_text("import multiprocessing\n"
                      "if multiprocessing.parent_process() is not None:\n"
                      "    raise RuntimeError('boom in a worker')\n")
    marker = uuid.uuid4().hex
    argv = ("--import", str(plugin), "bench", "all_reduce", "--nproc", "2", "-b", "4KiB",
            "-e", "4KiB", "-a", "builtin")
    for verbose in ((), ("--verbose",)):
        cli = _ringccl(*argv, *verbose, marker=marker)
        try:
            out, err = cli.communicate(timeout=bounds.job(300))
            assert cli.returncode == 2, (out, err)
            assert err.startswith("ringccl: error: rank ") and (
                "RuntimeError: boom in a worker" in err), err
            if verbose:
                assert "Traceback (most recent call last)" in err
            else:
                assert len(err.strip().splitlines()) == 1, err
        finally:
            kill_all(cli, marker)


@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather"])
def test_a_piped_run_prints_whole_numbers_and_no_future_warning(collective):
    marker = uuid.uuid4().hex
    cli = _ringccl("run", collective, "--nproc", "2", "-c", "1Mi", "--iters", "2", marker=marker,
                   COLUMNS="40")
    try:
        out, err = cli.communicate(timeout=bounds.job(300))
        assert cli.returncode == 0, err
        assert "FutureWarning" not in err and "deprecated" not in err, err
        assert "…" not in out
        data = [line.split() for line in out.splitlines()
                if line.startswith(("ringccl ", "gloo "))]
        assert len(data) == 2
        for fields in data:  # label (2 words), size (2), count, type, 5 numbers, #wrong
            assert len(fields) == 12, fields
            for number in fields[6:11]:
                float(number)
    finally:
        kill_all(cli, marker)


@pytest.mark.parametrize("argv", [
    ("train", "--nproc", "2", "--epochs", "200", "--no-plot"),
    ("bench", "all_reduce", "--nproc", "2", "-b", "4KiB", "-e", "64MiB", "--backend", "mpi",
     "-a", "ring,builtin", "--csv"),
])
def test_ctrl_c_on_train_and_mpi_bench_is_one_line(argv):
    if "mpi" in argv:
        pytest.importorskip("mpi4py")
    if "train" in argv:
        pytest.importorskip("sklearn")
    marker = uuid.uuid4().hex
    cli = _ringccl(*argv, marker=marker)
    try:
        workers = wait_for(lambda: (marked(marker) - {cli.pid}) if len(
            marked(marker) - {cli.pid}) >= 2 else None, START_S)
        assert workers, "the workers did not start"
        time.sleep(3)
        os.killpg(cli.pid, signal.SIGINT)
        out, err = cli.communicate(timeout=bounds.job(120))
        assert cli.returncode == 130, (out, err)
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("interrupted: ringccl train stopped"
                                                       if "train" in argv else "interrupted: "), err
        if "--csv" in argv:  # the rows so far, as CSV: a header and one line per row
            got = re.fullmatch(r"interrupted: (\d+) of \d+ rows measured, every worker ended",
                               lines[0])
            assert got and len(out.splitlines()) == 1 + int(got.group(1)), (out, err)
        left = wait_for(lambda: not {p for p in workers if p in marked(marker)}, GONE_S)
        assert left, f"processes {sorted(workers & marked(marker))} outlived the interrupt"
    finally:
        kill_all(cli, marker)
