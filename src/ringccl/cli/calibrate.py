"""``ringccl calibrate``: time GEMMs, attention and a device copy on the local device (CUDA
where there is one, the CPU otherwise) and write the compute profile a planner reads
(:mod:`ringccl.costmodel.compute_profile`)."""

from __future__ import annotations

import json
from pathlib import Path

from .. import resources, units
from ..args import JSON_SUFFIXES
from ..bench.compute import DEFAULT_SHAPES, DTYPES, layer_attention, layer_gemms, measure, \
    resolve_device
from ..costmodel.compute_profile import DTYPE_BYTES, make_compute_profile
from ..errors import ArgumentError
from ..planner import resolve_model
from .common import (emit_json, name_list, nonnegative_int, output_path, positive_int, progress,
                     size_arg, table)

__all__ = ["register"]

_LAYER_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "seq_length")
#: the smallest copy :func:`ringccl.bench.compute.copy_bandwidth` times
_MIN_COPY = 1024
#: the share of the memory available now that calibrate's largest buffers may take: the rest
#: is torch's, the interpreter's and the machine's other work's
_MEMORY_SHARE = 0.8


def _free_memory(device: str) -> tuple[int | None, str]:
    """(bytes free for new buffers on ``device``, what they are): the GPU's free memory on
    CUDA, else :func:`ringccl.resources.available_memory` (None where it cannot be read)."""
    if device == "cuda":
        import torch
        return int(torch.cuda.mem_get_info()[0]), "free on the GPU"
    return resources.available_memory(), "of memory available on this machine"


def _check_memory(args, device: str, gemms, attention, dtypes) -> None:
    """Refuse, before any timing, buffers calibrate would allocate beyond
    :data:`_MEMORY_SHARE` of the memory free now: the copy probe's two --memory-bytes buffers,
    the largest GEMM's operands and product, the largest attention's q, k, v and output.

    Raises:
        ArgumentError: naming --memory-bytes, or the shape and the options that size it, the
            bytes needed and the bytes available.
    """
    have, where = _free_memory(device)
    if have is None:
        return
    limit = int(have * _MEMORY_SHARE)
    avail = (f"more than {_MEMORY_SHARE:.0%} of the {units.format_size(have)} {where} now")
    copy = 2 * (args.memory_bytes // 4 * 4)
    if copy > limit:
        raise ArgumentError(f"--memory-bytes {units.format_size(args.memory_bytes)}: the copy "
                            f"probe allocates two buffers of it ({units.format_size(copy)}), "
                            f"{avail}; give at most {units.format_size(limit // 2)} (default "
                            "256MiB)")
    size = max(DTYPE_BYTES.get(d, 4) for d in dtypes)
    shapes = [(f"GEMM {name!r} (m={m}, n={n}, k={k})", size * (m * k + k * n + m * n))
              for name, m, n, k in gemms]
    shapes += [(f"attention {name!r} (batch={b}, heads={h}, seq={s}, head_dim={d})",
                4 * size * b * h * s * d) for name, b, h, s, d, _ in attention]
    what, need = max(shapes, key=lambda item: item[1])
    if need > limit:
        raise ArgumentError(f"the {what} needs {units.format_size(need)} of buffers, {avail}; "
                            "time smaller shapes (a lower --seq-length or --micro-batch-size, "
                            "a larger --tp, smaller layer options)")


def _check_heads(fields: dict, given: dict, model) -> None:
    """Refuse heads that do not divide the layer, as the plan refuses them in a model
    (:func:`ringccl.planner.model.check_shape`): a head dimension that is no integer, query
    heads that key/value heads do not divide. A field is named as the flag that set it, else as
    the model's field.

    Raises:
        ArgumentError: --num-attention-heads not a multiple of --num-key-value-heads,
            --hidden-size not a multiple of --num-attention-heads.
    """
    def name(f):
        if f in given:
            return f"--{f.replace('_', '-')}={fields[f]}"
        return f"{f}={fields[f]} (from --model {model})"

    nq, nkv = fields["num_attention_heads"], fields.get("num_key_value_heads")
    if nkv is not None and nq % nkv:
        raise ArgumentError(f"{name('num_attention_heads')} must be a multiple of "
                            f"{name('num_key_value_heads')}")
    # the layer's head dimension is hidden_size / heads; a model with its own head_dim (as
    # Gemma's) passes the plan's check, so only a flag that changed either is held to it
    if fields["hidden_size"] % nq and (model is None or {"hidden_size",
                                                         "num_attention_heads"} & set(given)):
        raise ArgumentError(f"{name('hidden_size')} must be a multiple of "
                            f"{name('num_attention_heads')} (the head dimension, hidden size / "
                            "heads, must be an integer)")


def _shapes(args, device: str):
    """(GEMMs, attention shapes, where they came from)."""
    given = {f: getattr(args, f) for f in _LAYER_FIELDS + ("num_key_value_heads", "vocab_size")
             if getattr(args, f) is not None}
    if args.model is not None:
        cfg = resolve_model(args.model, seq_length=args.seq_length)
        fields = {"hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
                  "num_attention_heads": cfg.num_attention_heads, "seq_length": cfg.seq_length,
                  "num_key_value_heads": cfg.num_key_value_heads,
                  "vocab_size": cfg.vocab_size if args.output_layer else None}
        fields.update(given)
        gated, source = cfg.gated_mlp, f"model {cfg.name}"
        if not {"hidden_size", "num_attention_heads"} & set(given):
            fields["head_dim"] = cfg.head_dim   # the model's own (Gemma's is not h / heads)
    elif given:
        missing = [f"--{f.replace('_', '-')}" for f in _LAYER_FIELDS if f not in given]
        if missing:
            raise ArgumentError(f"a layer's shapes need {', '.join(missing)} too (or --model)")
        fields, gated, source = given, not args.no_gated_mlp, "layer options"
    else:
        gemms, attention = DEFAULT_SHAPES[device]
        return list(gemms), list(attention), f"default set ({device})"
    _check_heads(fields, given, args.model)
    gemms = layer_gemms(fields["hidden_size"], fields["intermediate_size"],
                        fields["num_attention_heads"], fields["seq_length"],
                        args.micro_batch_size, args.tp, fields.get("num_key_value_heads"),
                        gated, fields.get("vocab_size"), fields.get("head_dim"))
    attention = layer_attention(fields["hidden_size"], fields["num_attention_heads"],
                                fields["seq_length"], args.micro_batch_size, args.tp,
                                fields.get("head_dim"))
    return gemms, attention, (f"{source}: micro_batch_size {args.micro_batch_size}, "
                              f"tp {args.tp}")


def _cmd(args) -> int:
    device = resolve_device(args.device)
    dtypes = args.dtype or (["bfloat16"] if device == "cuda" else ["float32"])
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise ArgumentError(f"--dtype {','.join(bad)}: not timed; expected from "
                            f"{', '.join(DTYPES)}")
    if args.memory_bytes < _MIN_COPY:  # checked here, before any timing, as the flag
        raise ArgumentError(f"--memory-bytes {args.memory_bytes} is too small: the copy "
                            f"bandwidth probe needs >= {_MIN_COPY} bytes (e.g. 256MiB)")
    gemms, attention, source = _shapes(args, device)
    _check_memory(args, device, gemms, attention, dtypes)
    total = (len(gemms) + len(attention)) * len(dtypes) + 1
    bar, advance = progress(total, f"calibrating on {device}")
    with bar:
        measured = measure(gemms, attention, dtypes, device, args.iters, args.warmup,
                           args.memory_bytes, on_step=advance, threads=args.threads)
    profile = make_compute_profile(measured, source)
    if args.out:
        try:
            Path(args.out).write_text(json.dumps(profile, indent=2) + "\n")
        except OSError as exc:
            raise ArgumentError(f"--out {args.out!r}: cannot write it ({exc})") from None
    if args.json:
        emit_json(profile)
        return 0
    dev = profile["device"]
    table(f"GEMMs on {dev['name']} ({dev['type']}, torch {dev['torch']}); {source}",
          ["GEMM", "m", "n", "k", "dtype", "time (us)", "TFLOP/s", "efficiency"],
          [[g["name"], g["m"], g["n"], g["k"], g["dtype"], f"{g['seconds'] * 1e6:.2f}",
            f"{g['flops_per_s'] / 1e12:.4f}", f"{100 * g['efficiency']:.1f}%"]
           for g in profile["gemm"]])
    if profile["attention"]:
        table("scaled_dot_product_attention (efficiency against the GEMM peak of its dtype)",
              ["attention", "batch", "heads", "seq", "head_dim", "dtype", "time (us)",
               "TFLOP/s", "efficiency"],
              [[a["name"], a["batch"], a["heads"], a["seq"], a["head_dim"], a["dtype"],
                f"{a['seconds'] * 1e6:.2f}", f"{a['flops_per_s'] / 1e12:.4f}",
                "-" if a["efficiency"] is None else f"{100 * a['efficiency']:.1f}%"]
               for a in profile["attention"]])
    peaks = ", ".join(f"{d} {p / 1e12:.4f} TFLOP/s" for d, p in profile["peak_flops"].items())
    print(f"peak achieved: {peaks}; memory bandwidth (copy): "
          f"{units.format_bandwidth(profile['memory_bandwidth'])}")
    if args.out:
        print(f"profile written to {args.out}")
    return 0


def register(sub) -> None:
    """``ringccl calibrate``."""
    p = sub.add_parser(
        "calibrate", help="time GEMMs, attention and memory bandwidth here; write a profile",
        description="Time torch GEMMs (matmul) and scaled_dot_product_attention at a model's "
        "shapes (--model, or the layer options) or a default set, and a device copy, on the "
        "local device (CUDA when available, else the CPU); write the compute profile "
        "(peak achieved FLOP/s per dtype, efficiency per shape, memory bandwidth).")
    s = p.add_argument_group("shapes (default: a built-in set per device)")
    s.add_argument("--model", help="a model preset or Hugging Face config.json: its layer's "
                   "GEMMs (forward, input and weight gradients) and attention")
    s.add_argument("--hidden-size", type=positive_int)
    s.add_argument("--intermediate-size", type=positive_int, help="the MLP's (ffn) size")
    s.add_argument("--num-attention-heads", type=positive_int)
    s.add_argument("--num-key-value-heads", type=positive_int)
    s.add_argument("--seq-length", type=positive_int)
    s.add_argument("--vocab-size", type=positive_int, help="also time the output layer")
    s.add_argument("--output-layer", action="store_true",
                   help="with --model: also time the output layer (vocab_size)")
    s.add_argument("--no-gated-mlp", action="store_true",
                   help="layer options: a plain MLP (default gated, as Llama)")
    s.add_argument("--micro-batch-size", type=positive_int, default=1)
    s.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel size")
    p.add_argument("--dtype", type=name_list,
                   help=f"dtypes to time, from {', '.join(DTYPES)} (default bfloat16 on CUDA, "
                   "float32 on the CPU)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--threads", type=positive_int,
                   help="CPU threads torch uses (default: torch's own)")
    p.add_argument("--iters", type=positive_int, default=10, help="timed calls per shape")
    p.add_argument("--warmup", type=nonnegative_int, default=3, help="untimed calls first")
    p.add_argument("--memory-bytes", type=size_arg, default=units.size("256MiB"),
                   help="buffer of the copy bandwidth probe (default 256MiB)")
    p.add_argument("--out", metavar="JSON", type=output_path(JSON_SUFFIXES, "a JSON compute "
                   "profile"), help="write the profile here (a name ending in .json)")
    p.add_argument("--json", action="store_true", help="print the profile")
    p.set_defaults(func=_cmd)
