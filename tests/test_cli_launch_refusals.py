"""What ``run``, ``bench`` and ``train`` refuse before any process starts: a dtype the
baseline collective does not take, flags that have no effect, empty entries in ``bench -a``,
and a buffer that does not fit in memory even for one worker."""

import pytest

from ringccl import resources
from ringccl.cli import main
from ringccl.errors import RingcclError

pytest.importorskip("torch")


class _Started(RingcclError):
    """A launcher was reached (main reports it as an error, exit 2)."""


@pytest.fixture
def no_launch(monkeypatch):
    """Every launcher the commands can reach replaced by one that records and refuses."""
    import ringccl.backends.torch.runner
    import ringccl.torch.launch
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise _Started("a launcher was called")

    monkeypatch.setattr(ringccl.torch.launch, "launch", refuse)
    monkeypatch.setattr(ringccl.backends.torch.runner, "launch_sweep", refuse)
    monkeypatch.setattr("ringccl.cli.run.launch_bench", refuse)
    monkeypatch.setattr(resources, "usable_cores", lambda: 2)
    monkeypatch.setattr(resources, "available_memory", lambda: 16 << 30)
    return calls


def _refused(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


SMALL = ["-n", "2", "-b", "4KiB", "-e", "4KiB"]


# -- dtypes the builtin collective does not take -------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["run", "all_reduce", "-n", "2", "-c", "5", "--dtype", "int16"],
    ["run", "reduce_scatter", "-n", "2", "-c", "4", "--dtype", "int16"],
    ["run", "broadcast", "-n", "2", "-c", "4", "--dtype", "int16"],
    ["bench", "all_reduce", *SMALL, "-d", "int16", "-a", "ring,builtin"],
    ["bench", "broadcast", *SMALL, "-d", "int16"],   # -a all includes builtin
])
def test_int16_is_refused_where_gloos_builtin_runs(argv, capsys, no_launch):
    err = _refused(argv, capsys)
    assert "int16" in err and "gloo" in err and "float16, float32, float64" in err, err
    assert not no_launch


def test_int16_without_the_builtin_reaches_the_launcher(capsys, no_launch):
    assert main(["bench", "all_reduce", *SMALL, "-d", "int16", "-a", "ring"]) == 2
    assert "a launcher was called" in capsys.readouterr().err and len(no_launch) == 1


def test_float16_is_refused_for_mpis_builtin_before_mpirun(capsys, no_launch):
    err = _refused(["bench", "all_reduce", *SMALL, "--backend", "mpi", "-d", "float16"], capsys)
    assert "float16" in err and "MPI" in err and "-a" in err, err
    assert not no_launch
    assert main(["bench", "all_reduce", *SMALL, "--backend", "mpi", "-d", "float16",
                 "-a", "ring"]) == 2
    assert "a launcher was called" in capsys.readouterr().err and len(no_launch) == 1


def test_the_gloo_dtypes_are_what_gloo_takes(gloo_dtypes_probe):
    from ringccl.cli.baselines import BUILTIN_DTYPES
    from ringccl.ops import SUPPORTED_DTYPES
    assert sorted(gloo_dtypes_probe) == sorted(d for d in SUPPORTED_DTYPES
                                               if d in BUILTIN_DTYPES["gloo"][0])


@pytest.fixture
def gloo_dtypes_probe():
    """The dtypes every builtin collective of a 1-rank gloo group takes (in this process)."""
    from .gloo_group import one_rank_gloo_group
    from ringccl.backends.torch.runner import TorchBackend
    from ringccl.bench import BUILTIN, BenchSpec
    from ringccl.bench.sweep import run_sweep
    from ringccl.collectives import COLLECTIVES
    from ringccl.ops import SUPPORTED_DTYPES
    group = one_rank_gloo_group()
    next(group)
    taken = []
    try:
        for dtype in SUPPORTED_DTYPES:
            try:
                for c in COLLECTIVES:
                    spec = BenchSpec(c, (BUILTIN,), 64, 64, 2, 1, 0, True, dtype,
                                     "max" if dtype == "bool" else "sum",
                                     placements=("out-of-place",), calibrate=False)
                    run_sweep(TorchBackend(), spec, None)
                taken.append(dtype)
            except RuntimeError:
                pass
    finally:
        next(group, None)
    return taken


# -- flags that have no effect -------------------------------------------------------------------

@pytest.mark.parametrize("argv,flag,when", [
    (["run", "all_gather", "-n", "2", "-c", "4", "--op", "max"], "--op", "all_gather"),
    (["run", "broadcast", "-n", "2", "-c", "4", "--op", "prod"], "--op", "broadcast"),
    (["bench", "all_gather", *SMALL, "-o", "max"], "-o", "all_gather"),
    (["bench", "broadcast", *SMALL, "--op", "max"], "--op", "broadcast"),
    (["bench", "all_reduce", *SMALL, "-r", "1"], "-r", "all_reduce"),
    (["run", "all_reduce", "-n", "2", "-c", "4", "--trace-iters", "3"], "--trace-iters",
     "without --trace"),
    (["bench", "all_reduce", *SMALL, "--trace-iters", "3"], "--trace-iters", "without --trace"),
    (["train", "-n", "2", "--first-bucket-mb", "1", "--mode", "ddp"], "--first-bucket-mb",
     "bucketer"),
    (["train", "-n", "2", "--first-bucket-mb", "1", "--mode", "zero"], "--first-bucket-mb",
     "bucketer"),
    (["train", "-n", "2", "--sync-micro-batches"], "--sync-micro-batches", "--accumulation"),
])
def test_a_flag_without_effect_is_refused(argv, flag, when, capsys, no_launch):
    err = _refused(argv, capsys)
    assert err.startswith(f"ringccl: error: {flag} has no effect") and when in err, err
    assert not no_launch


@pytest.mark.parametrize("argv", [
    ["run", "all_reduce", "-n", "2", "-c", "4", "--op", "max"],
    ["bench", "broadcast", *SMALL, "-r", "1"],
    ["train", "-n", "2", "--first-bucket-mb", "1", "--mode", "ddp,bucketer", "--no-plot"],
    ["train", "-n", "2", "--sync-micro-batches", "--accumulation", "2", "--no-plot"],
])
def test_the_same_flags_where_they_apply_reach_the_launcher(argv, capsys, no_launch):
    assert main(argv) == 2
    assert "a launcher was called" in capsys.readouterr().err and len(no_launch) == 1


# -- bench -a: an empty entry is refused ---------------------------------------------------------

@pytest.mark.parametrize("text,entry", [("ring,,direct", "entry 2 of 3"), (",ring", "entry 1 of 2"),
                                        ("ring,", "entry 2 of 2")])
def test_an_empty_algorithm_entry_is_refused(text, entry, capsys, no_launch):
    with pytest.raises(SystemExit) as exit_:   # by the option's type, as argparse reads it
        main(["bench", "all_reduce", *SMALL, "-a", text])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1, err
    assert "--algorithm/-a" in err[0] and f"{text!r}: {entry} is empty" in err[0], err
    assert not no_launch


# -- a buffer no worker can hold -----------------------------------------------------------------

@pytest.mark.parametrize("argv,flag,size", [
    (["run", "all_reduce", "-n", "2", "-c", "1Ti"], "--count 1099511627776", "4.00 TiB"),
    (["bench", "all_reduce", "-n", "2", "-b", "4KiB", "-e", "1TiB"],
     "-e/--maxbytes 1099511627776", "1.00 TiB"),
    (["bench", "all_reduce", "-n", "2", "-b", "4KiB", "-e", "8GiB"],
     "-e/--maxbytes 8589934592", "4.00 GiB"),  # 4KiB·4^k <= 8GiB
    (["train", "-n", "2", "--hidden", "100000000", "--no-plot"], "--hidden 100000000",
     "parameters"),
])
@pytest.mark.parametrize("over", [[], ["--oversubscribe"]])
def test_a_buffer_no_worker_can_hold_is_refused_without_oversubscribe(argv, flag, size, over,
                                                                      capsys, no_launch):
    err = _refused(argv + over, capsys)
    assert err.startswith(f"ringccl: error: {flag}: ") and size in err, err
    assert "16.00 GiB available" in err and "--oversubscribe" not in err, err
    assert "even one" in err and not no_launch
