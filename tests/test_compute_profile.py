"""Reading a compute profile (ringccl.costmodel.compute_profile) as the planner does: a damaged
or partial profile is refused when it is read, naming the file, the field and what it must be;
a file of another kind is named for what it is (nccl-tests output: fit it first). The profiles
are built from made-up measurements (make_compute_profile), so no torch is needed."""

import json
import pathlib

import pytest

from ringccl.cli import main
from ringccl.costmodel.compute_profile import (ComputeProfile, load_compute_profile,
                                               make_compute_profile)
from ringccl.errors import ArgumentError
from ringccl.planner import load_profile, resolve_cluster
from ringccl.planner.kernels import profile_dtype

NCCL_LOG = pathlib.Path(__file__).parent / "data" / "nccl_tests" / "h100_1node_all_reduce.log"
CLUSTER = {"preset": "dgx-h100", "nodes": 1, "gpus_per_node": 2}


def _measured():
    gemm = [{"name": f"g{i}", "m": s, "n": s, "k": s, "dtype": "float32", "flops": 2 * s ** 3,
             "time_s": 2 * s ** 3 / rate, "min_s": 2 * s ** 3 / rate}
            for i, (s, rate) in enumerate(((64, 1e10), (256, 4e10)))]
    attention = [{"name": "self-attention", "batch": 1, "heads": 4, "seq": 32, "head_dim": 16,
                  "causal": True, "dtype": "float32", "flops": 2 * 4 * 32 ** 2 * 16,
                  "time_s": 1e-5, "min_s": 1e-5}]
    return {"device": {"type": "cpu", "name": "test CPU", "torch": "2", "threads": 1},
            "gemm": gemm, "attention": attention, "memory": {"bandwidth": 2e10, "bytes": 1 << 20},
            "iters": 2, "warmup": 1}


def _write(tmp_path, change=None, name="profile.json"):
    data = make_compute_profile(_measured())
    if change is not None:
        change(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_a_whole_profile_is_read(tmp_path):
    # the made-up profile is one the loader takes, so the refusals below are the damage's
    p = load_compute_profile(_write(tmp_path))
    assert profile_dtype(p) == "float32" and p.peak_flops("float32") == pytest.approx(4e10)


@pytest.mark.parametrize("change, match", [
    # the user trial's: an empty gemm list crashed with "min() arg is an empty sequence"
    (lambda d: d.update(gemm=[]), r"gemm=\[\] must be a list of at least one timed GEMM"),
    # ... and an empty peak_flops with StopIteration in profile_dtype
    (lambda d: d.update(peak_flops={}), r"peak_flops=\{\} must be an object of dtype: FLOP/s "
                                        "with at least one dtype"),
    (lambda d: d["peak_flops"].update(float32=0), r"peak_flops\.float32=0 must be a FLOP/s > 0"),
    (lambda d: d["peak_flops"].update(bfloat16=1e12), "peak_flops has bfloat16 but gemm has no "
                                                      "entry of that dtype"),
    (lambda d: d["gemm"][0].update(m=0), r"gemm\[0\]\.m=0 must be an integer >= 1"),
    (lambda d: d["gemm"][1].update(efficiency=0.0), r"gemm\[1\]\.efficiency=0\.0 must be a "
                                                    r"fraction of the peak in \(0, 1\]"),
    # a GEMM's efficiency is its rate over the best GEMM's: 50 would be 5000%
    (lambda d: d["gemm"][0].update(efficiency=50), r"gemm\[0\]\.efficiency=50 must be a "
                                                   r"fraction of the peak in \(0, 1\]"),
    (lambda d: d.update(version=2), "version=2 is unknown; this ringccl reads "
                                    "ringccl-compute-profile version 1"),
    (lambda d: d.update(version="1"), "version='1' is unknown"),
    (lambda d: d["gemm"][1].update(seconds=None), r"gemm\[1\]\.seconds=None must be a time > 0"),
    (lambda d: d["gemm"][0].update(dtype="float16"), r"gemm\[0\]\.dtype='float16' must be a "
                                                     r"dtype of peak_flops \(float32\)"),
    (lambda d: d["gemm"].append("x"), r"gemm\[2\]='x' must be an object"),
    (lambda d: d.update(memory_bandwidth=-1), "memory_bandwidth=-1 must be bytes/s > 0"),
    (lambda d: d.update(attention=None), "attention=None must be a list"),
    (lambda d: d["attention"][0].update(seq=0), r"attention\[0\]\.seq=0 must be an integer >= 1"),
    (lambda d: d.update(device="cpu"), "device='cpu' must be an object"),
])
def test_a_damaged_profile_is_refused_when_read(tmp_path, change, match):
    path = _write(tmp_path, change)
    with pytest.raises(ArgumentError, match=match) as err:
        load_compute_profile(path)
    assert f"compute profile {str(path)!r}" in str(err.value)
    # the planner reads it when it resolves the cluster, before anything is priced
    with pytest.raises(ArgumentError, match=match):
        resolve_cluster({**CLUSTER, "profile": str(path)})


def test_ringccl_plan_refuses_a_damaged_profile_without_a_traceback(tmp_path, capsys):
    path = _write(tmp_path, lambda d: d.update(gemm=[]))
    assert main(["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8",
                 "--profile", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "gemm=[] must be a list" in err and "Traceback" not in err


def test_profile_dtype_of_a_profile_without_peaks_is_an_error_not_stop_iteration():
    with pytest.raises(ArgumentError, match=r"peak_flops=\{\} names no calibrated dtype"):
        profile_dtype(ComputeProfile({"peak_flops": {}}))


def test_a_compute_profile_missing_fields_is_named_as_one(tmp_path):
    path = _write(tmp_path, lambda d: (d.pop("memory_bandwidth"), d.pop("attention")))
    for read in (load_compute_profile, load_profile,
                 lambda p: resolve_cluster({**CLUSTER, "profile": str(p)})):
        with pytest.raises(ArgumentError) as err:
            read(path)
        message = str(err.value)
        # what kind of file it is, and what it lacks; not "has no fit" (an α-β fit's words)
        assert "is a ringccl-compute-profile but lacks memory_bandwidth, attention" in message
        assert str(path) in message and "has no fit" not in message


def test_a_whole_compute_profile_is_not_read_as_an_alpha_beta_fit(tmp_path):
    with pytest.raises(ArgumentError, match="is a compute profile .* not an α-β fit"):
        load_profile(_write(tmp_path))


def test_a_file_of_no_kind_says_which_kinds_there_are(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ArgumentError, match="has no fit .* neither a network profile .* nor a "
                                            "compute profile"):
        resolve_cluster({**CLUSTER, "profile": str(path)})


def test_an_nccl_tests_log_as_a_profile_says_to_fit_it_first():
    with pytest.raises(ArgumentError, match="cannot read it .*nccl-tests output: fit it first, "
                                            "`ringccl fit --json .*h100_1node_all_reduce.log"):
        resolve_cluster({**CLUSTER, "profile": str(NCCL_LOG)})
    with pytest.raises(ArgumentError, match="cannot read a `ringccl fit --json` file .*"
                                            "nccl-tests output: fit it first"):
        load_profile(NCCL_LOG)
    with pytest.raises(ArgumentError, match="cannot read it .*nccl-tests output, which "
                                            "`ringccl fit --json` turns into a network profile"):
        load_compute_profile(NCCL_LOG)


def test_a_binary_file_is_refused_naming_it(tmp_path, capsys):
    # a profile, a --config or a --model config.json that is not text: one line, no traceback
    path = tmp_path / "garbage.bin"
    path.write_bytes(bytes([0x8a, 0xa4, 0x91, 0xff, 0x00]) * 40)
    with pytest.raises(ArgumentError, match=rf"compute profile '{path}': cannot read it \(a "
                                            "binary file, not text: byte 0x8a at offset 0"):
        load_compute_profile(path)
    for argv in (["--model", "llama3-8b", "--gpus", "8", "--profile", str(path)],
                 ["--model", str(path), "--gpus", "8"], ["--config", str(path)]):
        assert main(["plan", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("ringccl: error: ") and err.count("\n") == 1, err
        assert str(path) in err and "a binary file, not text: byte 0x8a at offset 0" in err


@pytest.mark.parametrize("field", ["profile", "compute_profile"])
@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(gemm=[]), "gemm=[] must be a list of at least one timed GEMM"),
    (lambda d: d["peak_flops"].update(float32=0), "peak_flops.float32=0 must be a FLOP/s > 0"),
    (lambda d: d.pop("memory_bandwidth"), "is a ringccl-compute-profile but lacks "
                                          "memory_bandwidth"),
    (None, "cannot read it"),
])
def test_a_config_files_compute_profile_is_refused_naming_the_file_and_the_field(
        tmp_path, capsys, field, change, message):
    # as the other refusals of a --config file's values: the file, then its field
    profile = tmp_path / "missing.json" if change is None else _write(tmp_path, change)
    path = tmp_path / "plan.toml"
    path.write_text(f'model = "llama3-8b"\ngpus = 8\n[cluster]\n{field} = "{profile}"\n')
    assert main(["plan", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"ringccl: error: --config {str(path)!r}: cluster.{field}"), err
    assert str(profile) in err and message in err, err


def test_a_profile_timed_at_other_shapes_is_named_with_the_calibrate_line(tmp_path):
    """A compute profile timed at other GEMM shapes than the plan's layers prices them at the
    nearest timed FLOPs: the plan says how many it did not time and the calibrate command that
    times them; a profile holding the layer's own shapes draws no such warning."""
    from ringccl.bench.compute import layer_gemms
    from ringccl.planner import ModelConfig, plan
    model = ModelConfig(num_hidden_layers=2, hidden_size=256, num_attention_heads=4,
                        intermediate_size=512, vocab_size=1024, seq_length=64, name="tiny")
    cluster = resolve_cluster(dict(CLUSTER, compute_profile=str(_write(tmp_path))))
    warn = [w for w in plan(model, {"tp": 2}, cluster).warnings if "did not time" in w.message]
    assert len(warn) == 1 and "did not time 12 of the 12 GEMM shapes" in warn[0].message
    assert warn[0].first_change.startswith("ringccl calibrate --hidden-size 256 --intermediate-size"
                                        " 512 --num-attention-heads 4 --num-key-value-heads 4 "
                                        "--seq-length 64 --micro-batch-size 1 --tp 2")

    def own_shapes(d):
        d["gemm"] = [dict(d["gemm"][1], name=g[0], m=g[1], n=g[2], k=g[3])
                     for g in layer_gemms(256, 512, 4, 64, 1, 2, 4, True)]
    cluster = resolve_cluster(dict(CLUSTER, compute_profile=str(_write(tmp_path, own_shapes,
                                                                        "own.json"))))
    assert not [w for w in plan(model, {"tp": 2}, cluster).warnings
                if "did not time" in w.message]
