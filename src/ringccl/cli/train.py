"""``ringccl train``: data-parallel training of an MLP on the digits data set, one mode after
another in one launch (DDP with ringccl's hook, the bucketer, ZeRO, DDP on gloo), with rank 0's
progress shown here and the final losses compared."""

from __future__ import annotations

import dataclasses

from .. import units
from ..errors import ArgumentError, Interrupted
from ..backends.torch import launch as torch_launch
from .common import (Given, GivenFlag, add_format_option, add_launch_options, check_nproc,
                     emit_json, interrupted, need_torch, nonnegative_int, positive_int,
                     refuse_unused, seconds_arg, table, widths_arg)
from .progress import Progress

__all__ = ["register", "TRAIN_LOSS_RTOL"]


#: |final loss of a mode - final loss of the first mode| allowed, relative to the first: float32
#: runs that differ only in summation order (measured: <= 2.1e-4 after 220 steps on 4 ranks)
TRAIN_LOSS_RTOL = 1e-3


class _TrainProgress:
    """Rank 0's progress events, shown as they arrive (``launch``'s ``on_progress``, in the
    main thread): the steps of each mode on stderr (:class:`.progress.Progress`), and one line
    per epoch unless ``quiet``."""

    def __init__(self, epochs: int, quiet: bool):
        self.epochs, self.quiet = epochs, quiet
        self.last_epoch: tuple | None = None  # (mode, epoch) of the last epoch event
        self.tasks: dict = {}
        self.shown = Progress()

    def context(self):
        return self.shown

    def __call__(self, event) -> None:
        if event[0] == "step":
            _, mode, done, total = event
            if mode not in self.tasks:
                self.tasks[mode] = self.shown.task(f"training ({mode})", total=total)
            self.tasks[mode].update(completed=done)
        elif event[0] == "epoch":
            _, mode, h = event
            self.last_epoch = (mode, h["epoch"])
            if not self.quiet:
                print(f"[{mode:>8}] epoch {h['epoch']:>3}/{self.epochs}  batch loss "
                      f"{h['batch_loss']:.4f}  train loss {h['train_loss']:.4f}  train acc "
                      f"{h['train_acc']:6.2%}  test acc {h['test_acc']:6.2%}  "
                      f"({h['seconds']:.2f} s)", flush=True)


def _cmd_train(args) -> int:
    need_torch()
    from ..training.train import (BYTES_PER_PARAMETER, MODES, TrainConfig, load_digits,
                                  mlp_parameters, plot_training, train_worker)

    modes = list(MODES) if args.mode == "all" else [m.strip() for m in args.mode.split(",")]
    if args.compression and "ddp" not in modes:
        raise ArgumentError(f"compression={args.compression!r} applies to mode 'ddp' only")
    configs = [dataclasses.asdict(TrainConfig(
        mode=m, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
        weight_decay=args.weight_decay, hidden=tuple(args.hidden), seed=args.seed,
        algorithm=args.algorithm, accumulation=args.accumulation,
        sync_micro_batches=args.sync_micro_batches, bucket_cap_mb=args.bucket_cap_mb,
        first_bucket_mb=args.first_bucket_mb, max_norm=args.max_norm,
        compression=args.compression if m == "ddp" else None,
        plot=None if args.no_plot else args.plot).validate()) for m in modes]
    if "bucketer" not in modes:
        refuse_unused(args, ("first_bucket_mb",), f"with --mode {args.mode} (it is the first "
                      "bucket's cap of mode bucketer)")
    if args.accumulation == 1:
        refuse_unused(args, ("sync_micro_batches",), "with --accumulation 1 (one micro-batch "
                      "per step; it applies with --accumulation 2 or more)")
    # refused before anything is loaded or started: an idle torch worker plus the MLP's
    # parameters at the measured bytes each (the digits data are a few MB)
    parameters = mlp_parameters(tuple(args.hidden))
    model_bytes = BYTES_PER_PARAMETER * parameters
    check_nproc(args, worker_bytes=model_bytes, size_flag="--hidden",
                value=",".join(map(str, args.hidden)),
                hint=f"smaller --hidden widths (the MLP has {parameters:,} parameters, about "
                     f"{units.format_size(model_bytes)} in each worker at {BYTES_PER_PARAMETER} "
                     "bytes per parameter)")
    data = load_digits(args.seed)  # once here: importing scikit-learn costs seconds per process
    TrainConfig(batch_size=args.batch_size).check_data(args.nproc, len(data["y_train"]))
    shown = _TrainProgress(args.epochs, quiet=args.json)
    try:
        with shown.context():  # launch in this thread: its Ctrl-C handling applies
            outcome = torch_launch.launch(train_worker, args.nproc, configs, data,
                                          timeout=args.timeout, oversubscribe=True,
                                          verbose=args.verbose, on_progress=shown)
    except Interrupted:
        where = (f" in mode {shown.last_epoch[0]} after epoch {shown.last_epoch[1]} of "
                 f"{args.epochs}" if shown.last_epoch else " before the first epoch ended")
        return interrupted(f"ringccl train stopped{where}; every worker ended")
    results = outcome[0]  # rank 0's view; every rank checked replicas_identical
    first = results[0]["final_train_loss"]
    for r in results:
        r["loss_rel_diff"] = abs(r["final_train_loss"] - first) / max(abs(first), 1e-12)
    agree = all(r["loss_rel_diff"] <= TRAIN_LOSS_RTOL for r in results)
    plot = None if args.no_plot else plot_training(results, args.plot)
    report = {"runs": results, "loss_rtol": TRAIN_LOSS_RTOL, "losses_agree": agree,
              "plot": plot}
    if args.json:
        emit_json(report)
    else:
        _print_train(report, args)
    ok = agree and all(r["replicas_identical"] for r in results)
    return 0 if ok else 1


def _print_train(report: dict, args) -> None:
    rows = []
    for r in report["runs"]:
        expected = r["expected_bytes"]
        model = (expected["all_reduce"] if "all_reduce" in expected  # 0 on one rank
                 else expected["reduce_scatter"] + expected["all_gather"])
        per_step = r["bytes_per_step"]
        rows.append([r["mode"], f"{r['final_train_loss']:.5f}", f"{r['loss_rel_diff']:.1e}",
                     f"{r['final_test_acc']:.2%}",
                     "-" if per_step is None else units.format_size(per_step),
                     units.format_size(model), units.format_size(r["optimizer_state_bytes"]),
                     f"{r['step_seconds'] * 1e3:.1f}",
                     "yes" if r["replicas_identical"] else "NO"])
    runs = report["runs"]
    table(f"digits MLP ({runs[0]['parameters']:,} parameters) on {runs[0]['world_size']} local "
          f"gloo processes, {runs[0]['steps']} steps, accumulation {args.accumulation}",
          ["mode", "final loss", "rel. diff", "test acc", "sent/step", "model/round",
           "opt. state", "ms/step", "replicas equal"], rows, args.format)
    print("bytes per rank: sent/step measured from the schedules (torch mode: not measured); "
          "model/round = 2(N-1)/N x gradient bytes (zero: reduce-scatter + all-gather).")
    if len(runs) > 1:
        print(f"final losses {'agree' if report['losses_agree'] else 'DIFFER'} within relative "
              f"tolerance {report['loss_rtol']:g}")
    if report["plot"]:
        print(f"wrote {report['plot']} (loss curves, bucket timeline)")


def register(sub) -> None:
    """``ringccl train``."""
    p = sub.add_parser("train", help="data-parallel training of an MLP on the digits data set")
    p.add_argument("--nproc", "-n", type=positive_int, default=4, help="local processes")
    p.add_argument("--mode", default="ddp",
                   help="ddp (DDP + ringccl hook), bucketer, zero, torch (DDP + gloo), a comma "
                   "list, or all; several modes run one after the other in one launch")
    p.add_argument("--epochs", type=positive_int, default=20)
    p.add_argument("--batch-size", type=positive_int, default=32, help="per rank and step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=1e-2)
    p.add_argument("--hidden", type=widths_arg, default=(256, 256),
                   help="hidden widths, e.g. 256,256")
    p.add_argument("--accumulation", type=positive_int, default=1,
                   help="micro-batches per optimizer step (no_sync on all but the last)")
    p.add_argument("--sync-micro-batches", action=GivenFlag,
                   help="with --accumulation 2 or more: communicate after every micro-batch "
                   "(no no_sync), to compare bytes")
    p.add_argument("--algorithm", "-a", default="ring")
    p.add_argument("--bucket-cap-mb", type=float, default=0.125, help="MiB (default 0.125)")
    p.add_argument("--first-bucket-mb", type=float, default=0.03, action=Given,
                   help="mode bucketer: cap of the first bucket, MiB (default 0.03)")
    p.add_argument("--max-norm", type=float, default=None, help="clip by the global norm")
    p.add_argument("--compression", choices=["fp16", "bf16"], default=None,
                   help="mode ddp: all-reduce buckets in fp16/bf16")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="random seed (default 0)")
    p.add_argument("--plot", default="ringccl_train.png",
                   help="output image (default %(default)s; checked before training)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--timeout", type=seconds_arg, default=600.0, help="seconds before giving up")
    p.add_argument("--json", action="store_true")
    add_launch_options(p)
    add_format_option(p)
    p.set_defaults(func=_cmd_train)
