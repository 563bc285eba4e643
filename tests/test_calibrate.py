"""`ringccl calibrate` on the CPU with small shapes: the compute profile's structure, its numbers
positive and consistent, the layer's GEMM shapes, the loader a planner calls. No timed
asserts: nothing compares one measured time or rate with another (a loaded machine makes any
such bound flaky), only the profile's arithmetic on what was measured."""

import json
import math

import pytest

from ringccl.bench.compute import AttentionShape, GemmShape, layer_attention, layer_gemms
from ringccl.cli import main
from ringccl.costmodel.compute_profile import (ComputeProfile, load_compute_profile,
                                               make_compute_profile)
from ringccl.errors import ArgumentError

pytest.importorskip("torch")

SMALL = ["--hidden-size", "64", "--intermediate-size", "128", "--num-attention-heads", "4",
         "--seq-length", "32", "--threads", "1", "--iters", "2", "--warmup", "1",
         "--memory-bytes", "1MiB", "--device", "cpu"]


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("calibrate") / "profile.json"
    assert main(["calibrate", *SMALL, "--dtype", "float32,bfloat16", "--out", str(path)]) == 0
    return path


def test_the_profile_has_its_structure_and_positive_numbers(profile):
    data = json.loads(profile.read_text())
    assert data["format"] == "ringccl-compute-profile" and data["version"] == 1
    assert data["device"]["type"] == "cpu" and data["device"]["name"]
    assert set(data["peak_flops"]) == {"float32", "bfloat16"}
    # 4 GEMMs x (fwd, dgrad, wgrad) x 2 dtypes; one attention per dtype
    assert len(data["gemm"]) == 24 and len(data["attention"]) == 2
    for g in data["gemm"]:
        assert g["seconds"] > 0 and g["flops"] == 2 * g["m"] * g["n"] * g["k"]
        assert g["flops_per_s"] == pytest.approx(g["flops"] / g["seconds"])
        assert 0 < g["efficiency"] <= 1
    for dtype, peak in data["peak_flops"].items():
        rates = [g["flops_per_s"] for g in data["gemm"] if g["dtype"] == dtype]
        assert peak == max(rates) and math.isfinite(peak)
        assert any(g["efficiency"] == 1.0 for g in data["gemm"] if g["dtype"] == dtype)
    for a in data["attention"]:
        assert a["seconds"] > 0 and a["efficiency"] > 0 and a["causal"] is True
        assert a["flops"] == 2 * a["batch"] * a["heads"] * a["seq"] ** 2 * a["head_dim"]
    assert data["memory_bandwidth"] > 0
    assert data["settings"]["shapes_from"].startswith("layer options")


def test_the_loader_prices_measured_and_unmeasured_shapes(profile):
    p = load_compute_profile(profile)
    g = json.loads(profile.read_text())["gemm"][0]
    assert p.gemm_seconds(g["m"], g["n"], g["k"], g["dtype"]) == g["seconds"]
    big = p.gemm_seconds(4096, 4096, 4096, "float32")
    nearest = p.efficiency(4096, 4096, 4096, "float32")
    assert big >= 2 * 4096**3 / p.peak_flops("float32") and 0 < nearest <= 1
    assert big == pytest.approx(2 * 4096**3 / (p.peak_flops("float32") * nearest))
    # a vector: the roofline's larger term; which one wins depends on this machine's measured
    # peak, efficiency and copy bandwidth, so the measured profile is checked against both
    # terms, and a profile whose peak no GEMM limits must price it memory-bound
    moved = 4 * ((1 << 24) * 2 + 1) / p.memory_bandwidth
    thin = p.gemm_seconds(1, 1, 1 << 24, "float32")
    assert thin == pytest.approx(max(moved, 2 * (1 << 24) / (
        p.peak_flops("float32") * p.efficiency(1, 1, 1 << 24, "float32"))))
    unbounded = ComputeProfile({**p.data, "peak_flops": {"float32": 1e30}})
    assert unbounded.gemm_seconds(1, 1, 1 << 24, "float32") == pytest.approx(moved)
    with pytest.raises(ArgumentError, match="dtype='float16' was not calibrated"):
        p.gemm_seconds(8, 8, 8, "float16")
    with pytest.raises(ArgumentError, match="every dimension >= 1"):
        p.gemm_seconds(0, 8, 8, "float32")


def test_json_output_and_a_model_config(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 32}))
    args = ["calibrate", "--model", str(config), "--seq-length", "16", "--tp", "2",
            "--threads", "1", "--iters", "1", "--warmup", "0", "--memory-bytes", "1MiB",
            "--device", "cpu", "--json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["shapes_from"].startswith("model ")
    qkv = next(g for g in data["gemm"] if g["name"] == "qkv fwd")
    # tp 2: 2 query heads and 1 key/value head of 16 per rank: n = (2 + 2 x 1) x 16
    assert (qkv["m"], qkv["n"], qkv["k"]) == (16, 64, 64)


def test_layer_shapes_count_the_layer_flops():
    # Llama-2-7B-like layer: h 4096, ffn 11008 (gated), 32 heads, 8-way tp, 4096 tokens
    gemms = layer_gemms(4096, 11008, 32, 4096, 1, 8)
    weights = 4096 * 3 * 4096 + 4096 * 4096 + 4096 * 2 * 11008 + 11008 * 4096
    fwd = sum(g.flops for g in gemms if g[0].endswith("fwd"))
    assert fwd == 2 * 4096 * weights // 8
    assert sum(g.flops for g in gemms) == 3 * fwd  # dgrad and wgrad cost what forward does
    (attn,) = layer_attention(4096, 32, 4096, 1, 8)
    assert attn == AttentionShape("self-attention", 1, 4, 4096, 128, True)
    with pytest.raises(ArgumentError, match="num_attention_heads=30 is not divisible by tp=8"):
        layer_gemms(3840, 11008, 30, 4096, 1, 8)
    with pytest.raises(ArgumentError, match="m"):
        GemmShape("x", 0, 1, 1)
    assert len(layer_gemms(64, 128, 4, 8, vocab_size=1000)) == 15
    # a head dimension of its own (Gemma-7B: h 3072, 16 heads of 256): q/k/v and the output
    # projection are 16 x 256 = 4096 wide, not h
    gemma = {g[0]: g for g in layer_gemms(3072, 24576, 16, 8, head_dim=256)}
    assert (gemma["qkv fwd"][2], gemma["attention out fwd"][3]) == (3 * 16 * 256, 16 * 256)
    (attn,) = layer_attention(3072, 16, 8, head_dim=256)
    assert attn[4] == 256   # (name, batch, heads, seq, head_dim, causal)


def test_clear_errors(capsys):
    assert main(["calibrate", "--hidden-size", "64", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "--intermediate-size, --num-attention-heads, --seq-length" in err
    assert main(["calibrate", *SMALL, "--dtype", "float8"]) == 2
    assert "--dtype float8: not timed" in capsys.readouterr().err
    import torch
    if not torch.cuda.is_available():
        assert main(["calibrate", "--device", "cuda"]) == 2
        assert "torch sees no CUDA device" in capsys.readouterr().err


def test_a_zero_time_is_refused():
    measured = {"device": {}, "gemm": [{"name": "g", "m": 1, "n": 1, "k": 1, "dtype": "float32",
                                        "flops": 2, "time_s": 0.0, "min_s": 0.0}],
                "attention": [], "memory": {"bandwidth": 1.0, "bytes": 1}, "iters": 1,
                "warmup": 0}
    with pytest.raises(ArgumentError, match="a time must be > 0"):
        make_compute_profile(measured)


@pytest.mark.parametrize("extra, message", [
    (["--hidden-size", "100", "--num-attention-heads", "3"],
     "--hidden-size=100 must be a multiple of --num-attention-heads=3"),
    (["--num-attention-heads", "4", "--num-key-value-heads", "3"],
     "--num-attention-heads=4 must be a multiple of --num-key-value-heads=3"),
    (["--memory-bytes", "0"], "--memory-bytes 0 is too small: the copy bandwidth probe needs "
                              ">= 1024 bytes"),
])
def test_inconsistent_shapes_are_refused_before_any_timing(monkeypatch, capsys, extra, message):
    # as `ringccl plan` refuses the same heads in a config (planner.model.check_shape)
    import ringccl.cli.calibrate as calibrate

    def no_timing(*args, **kwargs):
        raise AssertionError("timed before the flags were checked")
    monkeypatch.setattr(calibrate, "measure", no_timing)
    assert main(["calibrate", *SMALL, *extra]) == 2
    assert message in capsys.readouterr().err


def test_a_model_field_a_flag_breaks_is_named_as_the_models(monkeypatch, tmp_path, capsys):
    import ringccl.cli.calibrate as calibrate
    monkeypatch.setattr(calibrate, "measure", lambda *a, **k: pytest.fail("timed"))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 32}))
    assert main(["calibrate", "--model", str(config), "--num-attention-heads", "5",
                 "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "--num-attention-heads=5 must be a multiple of num_key_value_heads=2 (from --model" in err


def test_a_binary_model_file_is_refused_naming_it(tmp_path, capsys):
    path = tmp_path / "garbage.bin"
    path.write_bytes(bytes([0xa4, 0x8a, 0xff]) * 40)
    assert main(["calibrate", "--model", str(path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err == (f"ringccl: error: model={str(path)!r}: cannot read a config.json (a binary "
                   "file, not text: byte 0xa4 at offset 0 is not UTF-8)\n")


@pytest.mark.parametrize("extra, available, message", [
    (["--memory-bytes", "1PiB"], 1 << 36, "--memory-bytes 1.00 PiB: the copy probe allocates "
                                          "two buffers of it (2.00 PiB), more than 80% of the "
                                          "64.00 GiB"),
    # just under what is free: the two buffers would take the machine
    (["--memory-bytes", "600MiB"], 1 << 30, "--memory-bytes 600.00 MiB: the copy probe "
                                            "allocates two buffers of it (1.17 GiB), more than "
                                            "80% of the 1.00 GiB of memory available"),
    (["--seq-length", "4194304"], 1 << 30,
     "the GEMM 'mlp in fwd' (m=4194304, n=256, k=64) needs 5.00 GiB of buffers"),
])
def test_buffers_beyond_the_free_memory_are_refused_before_any_timing(
        monkeypatch, capsys, extra, available, message):
    import ringccl.cli.calibrate as calibrate
    monkeypatch.setattr(calibrate, "measure", lambda *a, **k: pytest.fail("timed"))
    monkeypatch.setattr(calibrate.resources, "available_memory", lambda: available)
    assert main(["calibrate", *SMALL, *extra]) == 2
    assert message in capsys.readouterr().err


def test_the_copy_is_timed_on_buffers_already_written(monkeypatch):
    # with no warm-up, a target never written would be timed with its first-touch page faults
    # (2.8-5.3 GB/s instead of 28-33 on a CPU): count the faults while the copy is timed
    resource = pytest.importorskip("resource")
    from ringccl.bench import compute
    faults, real = [], compute._timed

    def counted(fn, device, iters, warmup):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        out = real(fn, device, iters, warmup)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        return out
    monkeypatch.setattr(compute, "_timed", counted)
    nbytes = 64 << 20
    compute.copy_bandwidth(nbytes, "cpu", iters=1, warmup=0)
    assert faults[0] < nbytes // 4096 // 20, faults   # 16384 pages of 4 KiB when untouched


@pytest.mark.parametrize("out, message", [
    ("", "argument --out: '' is no file name"),
    ("/proc/x.json", "argument --out: '/proc/x.json': cannot write it"),
])
def test_an_output_that_cannot_be_written_is_refused_before_any_timing(monkeypatch, capsys,
                                                                       out, message):
    import ringccl.cli.calibrate as calibrate
    monkeypatch.setattr(calibrate, "measure", lambda *a, **k: pytest.fail("timed"))
    with pytest.raises(SystemExit) as info:
        main(["calibrate", *SMALL, "--out", out])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_checking_the_output_leaves_no_file_and_keeps_an_existing_one(tmp_path):
    from ringccl.cli.common import output_path
    _out_path = output_path()
    new = tmp_path / "new.json"
    assert _out_path(str(new)) == str(new) and not new.exists()
    old = tmp_path / "old.json"
    old.write_text("kept")
    assert _out_path(str(old)) == str(old) and old.read_text() == "kept"
