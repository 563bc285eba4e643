"""`ringccl train` argument errors: refused in the parent, before any process starts."""

import pytest

pytest.importorskip("torch")

import ringccl.cli  # noqa: E402


@pytest.mark.parametrize("argv,message", [
    (["--mode", "nope"], "mode='nope' is not supported; expected one of ddp, bucketer, zero, "
                         "torch"),
    (["--accumulation", "3"], "batch_size=32 must be a multiple of accumulation=3"),
    (["--mode", "zero", "--compression", "fp16"], "compression='fp16' applies to mode 'ddp'"),
    (["--max-norm", "0"], "max_norm=0.0 must be > 0"),
    (["--algorithm", "bruck"], "algorithm='bruck' is not available for all_reduce; expected "
                               "one of ring"),
    (["--mode", "zero", "--algorithm", "tree"], "algorithm='tree' is not available for "
                                                "reduce_scatter"),
    (["--bucket-cap-mb", "-1"], "bucket_cap_mb=-1.0 must be a finite number of MiB > 0"),
    (["--first-bucket-mb", "0"], "first_bucket_mb=0.0 must be a finite number of MiB > 0"),
    (["--mode", "torch", "--algorithm", "tree", "--max-norm", "1"],
     "algorithm='tree' is not available for all_gather"),
    (["--batch-size", "100000", "--nproc", "2"], "batch_size=100000 x 2 ranks exceeds the 1437 "
                                                 "training images"),
    (["--lr", "inf"], "lr=inf must be a finite number > 0"),
    (["--weight-decay", "-1"], "weight_decay=-1.0 must be a finite number >= 0"),
    (["--weight-decay", "nan"], "weight_decay=nan must be a finite number >= 0"),
])
def test_bad_train_arguments_exit_2(capsys, argv, message):
    assert ringccl.cli.main(["train", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_model_too_large_for_the_memory_is_refused_before_any_worker(capsys, monkeypatch):
    import ringccl.torch.launch
    from ringccl import resources
    from ringccl.training.train import BYTES_PER_PARAMETER, make_mlp, mlp_parameters
    started = []
    monkeypatch.setattr(ringccl.torch.launch, "launch", lambda *a, **k: started.append(a))
    monkeypatch.setattr(resources, "available_memory", lambda: 40 << 30)
    assert mlp_parameters((7, 5)) == sum(p.numel() for p in make_mlp((7, 5)).parameters())
    # 4 workers of 401.5M parameters at 48 bytes each: 4 x 18 GiB, not in 40 GiB
    assert ringccl.cli.main(["train", "-n", "4", "--hidden", "20000,20000", "--no-plot"]) == 2
    err = capsys.readouterr().err
    assert "--nproc 4 needs about" in err and "smaller --hidden widths (the MLP has " \
        f"{mlp_parameters((20000, 20000)):,} parameters" in err
    assert f"at {BYTES_PER_PARAMETER} bytes per parameter" in err
    # ... and in 8 GiB not even one fits: no number of processes helps
    monkeypatch.setattr(resources, "available_memory", lambda: 8 << 30)
    assert ringccl.cli.main(["train", "-n", "4", "--hidden", "20000,20000", "--no-plot",
                             "--oversubscribe"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ringccl: error: --hidden 20000,20000: one worker process needs about "
                          "18.10 GiB, more than this machine's 8.00 GiB available") and \
        "--oversubscribe" not in err
    assert not started


def test_hidden_widths_are_parsed():
    args = ringccl.cli.build_parser().parse_args(["train", "--hidden", "64,32,16"])
    assert args.hidden == (64, 32, 16)
    with pytest.raises(SystemExit):
        ringccl.cli.build_parser().parse_args(["train", "--hidden", "64,x"])


def test_unwritable_plot_is_refused_before_training(capsys, tmp_path, monkeypatch):
    import ringccl.torch.launch
    started = []
    monkeypatch.setattr(ringccl.torch.launch, "launch", lambda *a, **k: started.append(a))
    assert ringccl.cli.main(["train", "--plot", "/nonexistent/x.png"]) == 2
    assert ringccl.cli.main(["train", "--plot", str(tmp_path)]) == 2
    assert ringccl.cli.main(["train", "--plot", str(tmp_path / "x.txt")]) == 2
    err = capsys.readouterr().err
    assert "plot='/nonexistent/x.png': directory '/nonexistent' does not exist" in err
    assert f"plot={str(tmp_path)!r} is a directory" in err
    assert f"plot={str(tmp_path / 'x.txt')!r} is written as an image: its name must end in .png" \
        in err   # the one check of the commands' output files (ringccl.args.output_problem)
    assert not started


@pytest.mark.timeout(600)
def test_train_on_one_rank_reports_every_mode(capsys):
    """One rank: each round moves 0 bytes (the table printed a KeyError there)."""
    code = ringccl.cli.main(["train", "--nproc", "1", "--epochs", "1", "--no-plot",
                             "--hidden", "16", "--mode", "all"])
    out, err = capsys.readouterr()
    assert code == 0, err
    for mode in ("ddp", "bucketer", "zero", "torch"):
        assert mode in out
