"""``ringccl plan``'s inputs refused before any work, one line naming the option (or the config
file's field), the value and what is allowed: cluster figures that are not finite or are
negative, text where a number belongs, a model config out of range, more GPUs than a plan takes,
an output file whose suffix is not what is written, and profiles that would be dropped."""

from __future__ import annotations

import json

import pytest

import ringccl.cli.plan as plan_cli
from ringccl import units
from ringccl.cli.app import main
from ringccl.errors import ArgumentError, ArgumentTypeError
from ringccl.planner.cluster import MAX_GPUS, check_cluster_field, resolve_cluster
from ringccl.planner.hf_config import from_dict
from ringccl.planner.model import MAX_EXPERTS, MAX_LAYERS

PLAN = ["plan", "--model", "llama3-8b", "--gpus", "64"]


@pytest.fixture
def no_work(monkeypatch):
    """A plan or a search that starts fails the test: every refusal comes first."""
    def refuse(*args, **kwargs):
        raise AssertionError("planning started")
    monkeypatch.setattr(plan_cli, "plan", refuse)
    monkeypatch.setattr(plan_cli, "search", refuse)


def _refused(capsys, argv) -> str:
    """The one stderr line of a refused command line (exit 2, no traceback)."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals (the option's type)
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


# -- cluster figures: finite, and >= 0 or > 0 as the field requires ----------------------------

@pytest.mark.parametrize("flag, value, message", [
    ("--gpu-memory", "nan", "gpu_memory='nan' must be a finite size > 0 such as '80GB', or "
     "bytes"),
    ("--gpu-memory", "inf", "gpu_memory='inf' must be a finite size > 0"),
    ("--intra-bandwidth", "nan", "intra_bandwidth='nan' must be a finite rate > 0"),
    ("--inter-bandwidth", "inf", "inter_bandwidth='inf' must be a finite rate > 0"),
    ("--intra-alpha", "nan", "intra_alpha='nan' must be a finite duration >= 0"),
    ("--inter-alpha", "inf", "inter_alpha='inf' must be a finite duration >= 0"),
])
def test_a_cluster_figure_that_is_not_finite_is_refused_naming_the_option(
        no_work, capsys, flag, value, message):
    err = _refused(capsys, PLAN + [flag, value])
    assert err.startswith(f"ringccl: error: {flag}: {message}"), err


@pytest.mark.parametrize("flag, value, message", [
    ("--peak-flops", "inf", "argument --peak-flops: inf is not finite: must be > 0 (FLOP/s)"),
    ("--peak-flops", "nan", "argument --peak-flops: nan is not finite: must be > 0 (FLOP/s)"),
    ("--compute-efficiency", "nan", "argument --compute-efficiency: nan is not finite: must be "
     "in (0, 1] (a fraction of peak)"),
])
def test_peak_and_efficiency_refuse_nan_and_inf(no_work, capsys, flag, value, message):
    assert message in _refused(capsys, PLAN + [flag, value])


@pytest.mark.parametrize("field", ["intra_bandwidth", "inter_bandwidth", "hbm_bandwidth",
                                   "intra_alpha", "inter_alpha", "peak_flops", "fp8_peak_flops",
                                   "gpu_memory", "gamma", "compute_efficiency",
                                   "memory_efficiency", "oversubscription"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_the_cluster_refuses_nan_and_inf_in_every_float_field(field, value):
    # a fraction's range (0, 1] holds no nan and no inf; every other range says "finite"
    allowed = r"(a number )?in \(0, 1\]" if field.endswith("efficiency") else ".*finite"
    with pytest.raises(ArgumentError, match=rf"^{field}={value!r} must be {allowed}"):
        resolve_cluster({"preset": "dgx-h100", field: value})
    with pytest.raises(ArgumentError, match=rf"^{field}={value!r} must be {allowed}"):
        check_cluster_field(field, value)


@pytest.mark.parametrize("flag, value, message", [
    ("--inter-alpha", "-1us", "inter_alpha='-1us' must be a finite duration >= 0 such as "
     "'5us', or seconds (it is negative)"),
    ("--intra-alpha", "-1e-6", "intra_alpha='-1e-6' must be a finite duration >= 0"),
    ("--gpu-memory", "-1GB", "gpu_memory='-1GB' must be a finite size > 0 such as '80GB', or "
     "bytes (it is negative)"),
    ("--inter-bandwidth", "-1GB/s", "inter_bandwidth='-1GB/s' must be a finite rate > 0"),
])
def test_a_negative_figure_is_called_negative_naming_the_option(no_work, capsys, flag, value,
                                                                 message):
    err = _refused(capsys, PLAN + [flag, value])
    assert err.startswith(f"ringccl: error: {flag}: {message}"), err
    assert "is not a" not in err


@pytest.mark.parametrize("parse, text, what", [
    (units.duration, "-1us", "duration '-1us' is negative: a duration must be >= 0"),
    (units.size, "-1GB", "size '-1GB' is negative: a size must be >= 0"),
    (units.bandwidth, "-5GB/s", "bandwidth '-5GB/s' is negative: a bandwidth must be > 0"),
    (units.count, "-1Mi", "count '-1Mi' is negative: a count must be >= 0"),
])
def test_the_unit_parsers_call_a_negative_value_negative(parse, text, what):
    with pytest.raises(ArgumentError, match=f"^{what}"):
        parse(text)


# -- a config file's text where a number belongs ------------------------------------------------

@pytest.mark.parametrize("field, text, allowed", [
    ("nodes", "four", "an integer >= 1"),
    ("gpus_per_node", "eight", "an integer >= 1"),
    ("intra_bandwidth", "fast", "a finite rate > 0 such as '450GB/s' or '400Gbps', or bytes/s"),
    ("inter_bandwidth", "fast", "a finite rate > 0"),
    ("hbm_bandwidth", "3.35TB", "a finite rate > 0"),
    ("intra_alpha", "soon", "a finite duration >= 0 such as '2us', or seconds"),
    ("inter_alpha", "-1us", "a finite duration >= 0 such as '5us', or seconds (it is "
     "negative)"),
    ("peak_flops", "lots", "finite FLOP/s > 0 such as 989e12 or '989TFLOPS'"),
    ("fp8_peak_flops", "inf", "finite FLOP/s > 0"),
    ("gpu_memory", "big", "a finite size > 0 such as '80GB', or bytes"),
    ("gpu_memory", "nan", "a finite size > 0"),
    ("gpu_memory", "80Gb", "a finite size > 0 such as '80GB', or bytes (size '80Gb' is "
     "ambiguous: lowercase b means bits"),
    ("gamma", "quick", "finite seconds per byte >= 0 or a rate such as '100GB/s'"),
    ("compute_efficiency", "high", "a number in (0, 1]"),
    ("oversubscription", "2:1", "a finite number >= 1"),
    ("collectives", "mpi", "one of nccl, ringccl"),
    ("profile_level", "foo", "'inter' or 'intra'"),
])
def test_config_text_names_the_field_the_value_and_what_is_allowed(no_work, tmp_path, capsys,
                                                                    field, text, allowed):
    path = tmp_path / "plan.toml"
    path.write_text(f'[cluster]\npreset = "dgx-a100"\n{field} = "{text}"\n')
    err = _refused(capsys, PLAN + ["--config", str(path)])
    assert f"--config {str(path)!r}: cluster.{field}=\"{text}\" must be {allowed}" in err, err


# -- a Hugging Face config.json out of range ----------------------------------------------------

LLAMA = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
         "vocab_size": 128256}


@pytest.mark.parametrize("value, shown", [(1e12, "1000000000000.0"), (10**12, "1000000000000"),
                                          (10**30, str(10**30)), (2**63, str(2**63)),
                                          (0, "0"), (32.0, "32.0")])
def test_a_layer_count_out_of_range_names_the_field_the_value_and_the_range(value, shown):
    # a float or a str is the wrong type (ArgumentTypeError), an int out of range ArgumentError
    with pytest.raises((ArgumentError, ArgumentTypeError),
                       match=rf"^num_hidden_layers={shown} must be an integer in "
                             rf"\[1, {MAX_LAYERS}\]"):
        from_dict({**LLAMA, "num_hidden_layers": value})


@pytest.mark.parametrize("field, value", [("hidden_size", 10**400), ("vocab_size", 2**63),
                                          ("intermediate_size", 10**40)])
def test_a_count_beyond_int64_is_refused_naming_it(field, value):
    with pytest.raises(ArgumentError, match=rf"^{field}=.* must be an integer in "
                                            rf"\[1, {units.MAX_INT}\]"):
        from_dict({**LLAMA, field: value})


def test_an_expert_count_beyond_the_bound_is_refused():
    moe = {**LLAMA, "num_local_experts": 10**9, "num_experts_per_tok": 2}
    with pytest.raises(ArgumentError, match=rf"^num_local_experts=1000000000 must be an integer "
                                            rf"in \[0, {MAX_EXPERTS}\]"):
        from_dict(moe)


@pytest.mark.parametrize("value", [1e12, 10**12, 10**30, 2**63])
def test_plan_refuses_a_config_json_with_too_many_layers_in_one_line(no_work, tmp_path, capsys,
                                                                     value):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "num_hidden_layers": value}))
    err = _refused(capsys, ["plan", "--model", str(path), "--gpus", "64"])
    assert f"num_hidden_layers={value!r} must be an integer in [1, {MAX_LAYERS}]" in err


# -- the GPUs a plan takes ---------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--gpus", str(MAX_GPUS + 1)], f"argument --gpus: {MAX_GPUS + 1} must be an integer in "
     f"[1, {MAX_GPUS}]"),
    (["--gpus", "4194304", "--search"], "argument --gpus: 4194304 must be an integer in"),
    (["--nodes", str(MAX_GPUS // 8 + 1)], f"--nodes: nodes={MAX_GPUS // 8 + 1} x "
     f"gpus_per_node=8 = {MAX_GPUS + 8:,} GPUs, more than the {MAX_GPUS:,} a plan takes"),
    (["--dp", str(MAX_GPUS), "--tp", "2"], f"the layout's dp x tp x cp x pp = {MAX_GPUS} x 2 x "
     f"1 x 1 = {2 * MAX_GPUS:,} GPUs, more than the {MAX_GPUS:,} a plan takes"),
])
def test_more_gpus_than_a_plan_takes_are_refused_before_any_work(no_work, capsys, argv, message):
    assert message in _refused(capsys, ["plan", "--model", "llama3-8b"] + argv)


def test_a_config_files_gpus_beyond_the_bound_are_refused(no_work, tmp_path, capsys):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"model": "llama3-8b", "gpus": 2 * MAX_GPUS}))
    err = _refused(capsys, ["plan", "--config", str(path)])
    assert f"gpus={2 * MAX_GPUS} must be an integer in [1, {MAX_GPUS}]" in err


@pytest.mark.parametrize("name, text, message", [
    ("plan.json", json.dumps({"model": "llama3-8b", "gpus": 2 * MAX_GPUS}),
     f"gpus={2 * MAX_GPUS} must be an integer in [1, {MAX_GPUS}] (the GPUs a plan takes)"),
    ("plan.toml", 'model = "llama3-8b"\n[layout]\ndp = 2048\ntp = 1024\n',
     f"the layout's dp x tp x cp x pp = 2048 x 1024 x 1 x 1 = 2,097,152 GPUs, more than the "
     f"{MAX_GPUS:,} a plan takes"),
    ("plan.toml", f'model = "llama3-8b"\n[cluster]\nnodes = {MAX_GPUS}\n',
     f"cluster.nodes={MAX_GPUS} x gpus_per_node=8 = {8 * MAX_GPUS:,} GPUs, more than the "
     f"{MAX_GPUS:,} a plan takes"),
])
def test_a_config_files_gpu_count_beyond_the_bound_names_the_file(no_work, tmp_path, capsys,
                                                                   name, text, message):
    # as every other refusal of a value the file gave: the file first, then its field
    path = tmp_path / name
    path.write_text(text)
    err = _refused(capsys, ["plan", "--config", str(path)])
    assert err.startswith(f"ringccl: error: --config {str(path)!r}: {message}"), err


def test_the_cluster_refuses_more_gpus_than_a_plan_takes(tmp_path, capsys):
    with pytest.raises(ArgumentError, match=f"^nodes={MAX_GPUS} x gpus_per_node=8 = "
                                            f"{8 * MAX_GPUS:,} GPUs, more than the "
                                            f"{MAX_GPUS:,} a plan takes"):
        resolve_cluster({"preset": "dgx-h100", "nodes": MAX_GPUS})
    with pytest.raises(ArgumentError, match=rf"^nodes=2097152 must be an integer in "
                                            rf"\[1, {MAX_GPUS}\]"):
        check_cluster_field("nodes", 2 * MAX_GPUS)
    path = tmp_path / "plan.toml"
    path.write_text(f'[cluster]\npreset = "dgx-a100"\ngpus_per_node = {2 * MAX_GPUS}\n')
    assert f"cluster.gpus_per_node={2 * MAX_GPUS} must be an integer in [1, {MAX_GPUS}]" in \
        _refused(capsys, PLAN + ["--config", str(path)])


def test_a_plan_at_the_gpu_bound_runs(capsys):
    assert main(["plan", "--model", "llama3-8b", "--gpus", str(MAX_GPUS), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["world_size"] == MAX_GPUS


# -- output files: the suffix of what is written -----------------------------------------------

def test_plan_emit_refuses_a_name_that_is_not_json(no_work, tmp_path, capsys):
    out = tmp_path / "x.png"
    err = _refused(capsys, PLAN + ["--emit", str(out)])
    assert f"argument --emit: '{out}' is written as a JSON step file: its name must end in " \
           ".json" in err
    assert not out.exists()


def test_plan_emit_takes_a_json_name_in_either_case(tmp_path, capsys):
    step = tmp_path / "STEP.JSON"
    assert main(["plan", "--model", "llama3-8b", "--gpus", "8", "--emit", str(step)]) == 0
    assert json.loads(step.read_text())["world_size"] == 8


def test_calibrate_out_refuses_a_name_that_is_not_json(monkeypatch, tmp_path, capsys):
    import ringccl.cli.calibrate as calibrate
    monkeypatch.setattr(calibrate, "measure", lambda *a, **k: pytest.fail("timed"))
    out = tmp_path / "prof.png"
    err = _refused(capsys, ["calibrate", "--device", "cpu", "--out", str(out)])
    assert f"argument --out: '{out}' is written as a JSON compute profile: its name must end " \
           "in .json" in err
    assert not out.exists()


# -- profiles: each one used, the level only where it applies ----------------------------------

def _network_profile(path, alpha=1e-6):
    from ringccl.costmodel.nccl import nccl_machine
    path.write_text(json.dumps({"format": "ringccl-network-profile", "version": 1,
                                "prior": "dgx-a100", "machine": nccl_machine("dgx-a100").to_dict(),
                                "levels": {k: {"alpha_s": alpha} for k in ("intra", "inter")}}))
    return str(path)


def _alpha_beta_fit(path, alpha=5e-6, bandwidth=50e9):
    path.write_text(json.dumps({"params": {"alpha": {"value": alpha},
                                           "beta": {"value": 1 / bandwidth}}}))
    return str(path)


def test_two_profiles_of_one_kind_are_refused_naming_both(no_work, tmp_path, capsys):
    a, b = _network_profile(tmp_path / "a.json"), _network_profile(tmp_path / "b.json", 9e-6)
    err = _refused(capsys, PLAN + ["--profile", a, "--profile", b])
    assert f"--profile: profile={a!r} and {b!r} are both network profiles" in err
    x, y = _alpha_beta_fit(tmp_path / "x.json"), _alpha_beta_fit(tmp_path / "y.json", 2e-6)
    with pytest.raises(ArgumentError, match="are both α-β fits"):
        resolve_cluster({"preset": "dgx-h100", "profile": [x, y]})


def test_profiles_of_different_kinds_are_each_used(tmp_path, capsys):
    net = _network_profile(tmp_path / "net.json")
    fit = _alpha_beta_fit(tmp_path / "fit.json", 3e-6, 40e9)
    assert main(PLAN + ["--profile", net, "--profile", fit, "--profile-level", "intra",
                        "--json"]) == 0
    cluster = json.loads(capsys.readouterr().out)["cluster"]
    assert cluster["network_profile"] == net
    assert cluster["intra_alpha"] == pytest.approx(3e-6)
    assert cluster["intra_bandwidth"] == pytest.approx(40e9)


def test_profile_level_without_a_profile_is_refused(no_work, tmp_path, capsys):
    err = _refused(capsys, PLAN + ["--profile-level", "intra"])
    assert "--profile-level: profile_level='intra' applies to a profile's α-β fit, and no " \
           "profile is given" in err
    path = tmp_path / "plan.toml"
    path.write_text('[cluster]\npreset = "dgx-a100"\nprofile_level = "intra"\n')
    assert "profile_level='intra' applies to a profile's α-β fit, and no profile is given" \
        in _refused(capsys, PLAN + ["--config", str(path)])


def test_profile_level_without_an_alpha_beta_fit_is_refused(no_work, tmp_path, capsys):
    net = _network_profile(tmp_path / "net.json")
    err = _refused(capsys, PLAN + ["--profile", net, "--profile-level", "intra"])
    assert f"--profile-level: profile_level='intra' applies to a profile's α-β fit, and " \
           f"{net!r} is a network profile" in err


def test_a_profile_level_that_is_no_level_is_refused_with_or_without_a_profile():
    for cluster in ({"profile_level": "foo"},
                    {"profile_level": "foo", "profile": "missing.json"}):
        with pytest.raises(ArgumentError, match="profile_level='foo' must be 'inter' or "
                                                "'intra'"):
            resolve_cluster({"preset": "dgx-h100", **cluster})


def test_a_config_files_sequence_beyond_the_models_positions_names_the_file(no_work, tmp_path,
                                                                           capsys):
    """GPT-2 has 1,024 learned positions: a file's longer seq_length is refused naming the file
    and the config.json field that bounds it."""
    from transformers import AutoConfig
    model = tmp_path / "gpt2.json"
    model.write_text(AutoConfig.for_model("gpt2").to_json_string())
    conf = tmp_path / "p.toml"
    conf.write_text(f'model = "{model}"\nseq_length = 2048\n')
    line = _refused(capsys, ["plan", "--config", str(conf)])
    assert line.startswith(f"ringccl: error: --config {str(conf)!r}: seq_length=2048 exceeds "
                           "n_positions=1024"), line
