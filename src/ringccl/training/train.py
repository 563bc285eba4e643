"""A real data-parallel training run: an MLP on scikit-learn's bundled digits (``ringccl train``).

The digits data set (1,797 8×8 grey images of 10 digits, 64 features in 0..16) ships inside
scikit-learn, so nothing is downloaded. Every rank holds the whole set, splits it the same way
(fixed seed) into 1,437 training and 360 test images, and each optimizer step consumes one global
batch of ``world_size × batch_size`` images, rank r taking the r-th slice. With accumulation k,
each rank splits its slice into k micro-batches and scales each micro-batch loss by 1/k, so
every mode and every k computes the same mathematical update - only summation order differs.

Modes (the same model, data and AdamW hyperparameters):

* ``ddp``: ``DistributedDataParallel`` with :func:`ringccl.torch.comm_hook`;
* ``bucketer``: :class:`ringccl.torch.GradientBucketer` (our buckets and overlap, no DDP);
* ``zero``: :class:`ringccl.torch.ShardedOptimizer` (reduce-scatter, 1/N AdamW state,
  all-gather);
* ``torch``: ``DistributedDataParallel`` with gloo's own all-reduce (the reference).

:func:`train_worker` runs on each process (:func:`ringccl.torch.launch.launch`) and returns plain
Python data; :func:`plot_training` draws the loss curves and one step's bucket timeline.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..algorithms import get_algorithm
from ..args import IMAGE_SUFFIXES, check_output_path, image_format
from ..errors import ArgumentError, RingcclError
from .bucketer import GradientBucketer, check_cap_mb
from .clip import clip_grad_norm_
from .ddp import comm_hook
from .zero import ShardedOptimizer, optimizer_state_bytes

__all__ = ["TrainConfig", "MODES", "BYTES_PER_PARAMETER", "check_plot_path", "load_digits",
           "make_mlp", "mlp_parameters", "train_worker", "plot_training"]

MODES = ("ddp", "bucketer", "zero", "torch")

#: peak bytes a training worker holds per parameter of the MLP, beyond the idle worker
#: (:data:`ringccl.resources.WORKER_BYTES`): fp32 weights, gradients, AdamW's two moments, the
#: buckets' and the collectives' copies, the final replica check. Measured: ``ringccl train -n 2
#: --epochs 1 --hidden 4000,4000`` (16.3M parameters) against ``--hidden 256,256``, the largest
#: worker's peak RSS: 47 bytes per parameter in modes ddp and bucketer, 46 in zero, 39 in torch.
BYTES_PER_PARAMETER = 48


@dataclass
class TrainConfig:
    """Hyperparameters of one run (identical on every rank).

    batch_size is per rank and per optimizer step; bucket caps are MiB (tiny defaults: the whole
    MLP is ~0.4 MB, so DDP's 25 MiB would make one bucket and leave nothing to overlap).
    """

    mode: str = "ddp"
    epochs: int = 20
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 1e-2
    hidden: tuple = (256, 256)
    seed: int = 0
    algorithm: str = "ring"
    accumulation: int = 1
    sync_micro_batches: bool = False   # True: communicate on every micro-batch (no no_sync)
    bucket_cap_mb: float = 0.125
    first_bucket_mb: float = 0.03
    max_norm: float | None = None
    compression: str | None = None
    test_size: int = 360
    timeline_steps: int = 5
    plot: str | None = None            # where plot_training will write (checked up front)

    def validate(self) -> "TrainConfig":
        if self.mode not in MODES:
            raise ArgumentError(f"mode={self.mode!r} is not supported; expected one of "
                                f"{', '.join(MODES)}")
        for name in ("epochs", "batch_size", "accumulation"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ArgumentError(f"{name}={value!r} must be an integer >= 1")
        if self.batch_size % self.accumulation:
            raise ArgumentError(f"batch_size={self.batch_size} must be a multiple of "
                                f"accumulation={self.accumulation}")
        if not 0 < self.lr < math.inf:
            raise ArgumentError(f"lr={self.lr!r} must be a finite number > 0")
        if not 0 <= self.weight_decay < math.inf:
            raise ArgumentError(f"weight_decay={self.weight_decay!r} must be a finite number >= 0")
        if self.max_norm is not None and not self.max_norm > 0:
            raise ArgumentError(f"max_norm={self.max_norm!r} must be > 0")
        if self.compression is not None and self.mode != "ddp":
            raise ArgumentError(f"compression={self.compression!r} applies to mode 'ddp' only")
        check_cap_mb(self.bucket_cap_mb, "bucket_cap_mb")
        check_cap_mb(self.first_bucket_mb, "first_bucket_mb")
        # the collectives each mode runs with `algorithm` (torch's DDP runs gloo's own; the
        # clipping of replicated gradients all-gathers the partial norms)
        uses = {"ddp": ("all_reduce",), "bucketer": ("all_reduce",),
                "zero": ("reduce_scatter", "all_gather"), "torch": ()}[self.mode]
        if self.max_norm is not None and self.mode != "zero":
            uses += ("all_gather",)
        for collective in uses:
            get_algorithm(collective, self.algorithm)  # ArgumentError naming what exists
        if self.plot is not None:
            check_plot_path(self.plot)
        return self

    def check_data(self, world_size: int, train_size: int) -> None:
        """Raises ArgumentError unless a global batch (world_size × batch_size) fits in the
        ``train_size`` training images."""
        if self.batch_size * world_size > train_size:
            raise ArgumentError(f"batch_size={self.batch_size} x {world_size} ranks exceeds the "
                                f"{train_size} training images")


def check_plot_path(path: str, argument: str = "plot") -> str:
    """``path`` if a plot can be written there (:func:`ringccl.args.check_output_path`: its
    directory exists and is writable, its suffix one matplotlib writes), checked before
    training, not after minutes of it.

    Raises:
        ArgumentTypeError: not a path. ArgumentError: a missing or unwritable directory, a
            directory as the path, another suffix (the message names the path).
    """
    return check_output_path(path, argument, IMAGE_SUFFIXES, "an image")


def load_digits(seed: int = 0, test_size: int = 360) -> dict:
    """scikit-learn's bundled digits, split with a fixed permutation.

    Load it once in the parent and pass it to :func:`train_worker`: importing scikit-learn
    takes seconds per process.

    Returns:
        dict of numpy arrays: x_train (n, 64) float32 in [0, 1], y_train (n,) int64, x_test
        (test_size, 64), y_test.
    Raises:
        RingcclError: scikit-learn is not installed.
    """
    try:
        from sklearn.datasets import load_digits as sk_load_digits
    except ImportError:
        raise RingcclError("the digits data set needs scikit-learn: pip install "
                           "'ringccl[train]'") from None
    digits = sk_load_digits()
    x = (digits.data / 16.0).astype("float32")
    y = digits.target.astype("int64")
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed)).numpy()
    test, train = perm[:test_size], perm[test_size:]
    return {"x_train": x[train], "y_train": y[train], "x_test": x[test], "y_test": y[test]}


def mlp_parameters(hidden=(256, 256), inputs: int = 64, classes: int = 10) -> int:
    """Parameters (weights and biases) of :func:`make_mlp` with these widths."""
    widths = [inputs, *hidden, classes]
    return sum((a + 1) * b for a, b in zip(widths, widths[1:]))


def make_mlp(hidden=(256, 256), seed: int = 0, inputs: int = 64, classes: int = 10):
    """``Linear-ReLU`` layers of the given widths, then ``Linear`` to ``classes``; the same
    initial weights on every rank (seeded)."""
    torch.manual_seed(seed)
    layers, width = [], inputs
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    layers.append(torch.nn.Linear(width, classes))
    return torch.nn.Sequential(*layers)


def _evaluate(model, x, y) -> tuple[float, float]:
    with torch.no_grad():
        logits = model(x)
        return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


class _Mode:
    """The per-mode pieces: what to call forward on, how to sync, the optimizer, the stats."""

    def __init__(self, cfg: TrainConfig, model: torch.nn.Module):
        from torch.nn.parallel import DistributedDataParallel as DDP

        self.cfg, self.model = cfg, model
        self.forward, self.stats, self.bucketer, self.hook = model, None, None, None
        adamw = dict(lr=cfg.lr, weight_decay=cfg.weight_decay)
        if cfg.mode in ("ddp", "torch"):
            ddp = DDP(model, bucket_cap_mb=cfg.bucket_cap_mb)
            if cfg.mode == "ddp":
                self.hook = comm_hook(cfg.algorithm, compression=cfg.compression)
                ddp.register_comm_hook(None, self.hook)
                self.stats = self.hook.stats
            self.forward, self.sync = ddp, ddp
            self.optimizer = torch.optim.AdamW(model.parameters(), **adamw)
        elif cfg.mode == "bucketer":
            self.bucketer = GradientBucketer(model, cfg.bucket_cap_mb, cfg.first_bucket_mb,
                                             algorithm=cfg.algorithm)
            self.sync, self.stats = self.bucketer, self.bucketer.stats
            self.optimizer = torch.optim.AdamW(model.parameters(), **adamw)
        else:
            self.optimizer = ShardedOptimizer(model.parameters(), torch.optim.AdamW,
                                              algorithm=cfg.algorithm, **adamw)
            self.sync, self.stats = self.optimizer, self.optimizer.stats

    def backward_done(self) -> None:
        if self.bucketer is not None:
            self.bucketer.finish()

    def clip(self, max_norm: float) -> None:
        if self.cfg.mode == "zero":
            self.optimizer.clip_grad_norm_(max_norm)
        else:  # gradients are replicated after the all-reduce: counted once
            clip_grad_norm_(self.model.parameters(), max_norm, algorithm=self.cfg.algorithm)

    def state_bytes(self) -> int:
        if self.cfg.mode == "zero":
            return self.optimizer.state_bytes()
        return optimizer_state_bytes(self.optimizer)

    def close(self) -> None:
        if self.bucketer is not None:
            self.bucketer.remove()
        if self.hook is not None:
            self.hook.communicator.close()
        if self.cfg.mode == "zero":
            self.optimizer.remove()


def _expected_bytes(cfg: TrainConfig, model, world_size: int) -> dict:
    """Closed-form bytes per rank per communication round (ring: Patarasuk & Yuan 2009)."""
    params = list(model.parameters())
    grad_bytes = sum(p.numel() * p.element_size() for p in params)
    n = world_size
    if cfg.mode == "zero":
        padded = math.ceil(sum(p.numel() for p in params) / n) * n * params[0].element_size()
        return {"gradient_bytes": grad_bytes, "reduce_scatter": (n - 1) / n * padded,
                "all_gather": (n - 1) / n * padded}
    wire = grad_bytes // 2 if cfg.compression else grad_bytes
    return {"gradient_bytes": grad_bytes, "all_reduce": 2 * (n - 1) / n * wire}


def _one_run(rank: int, world_size: int, cfg: TrainConfig, data: dict, progress) -> dict:
    x_train, y_train, x_test, y_test = (torch.from_numpy(data[k]) for k in
                                        ("x_train", "y_train", "x_test", "y_test"))
    model = make_mlp(cfg.hidden, cfg.seed)
    mode = _Mode(cfg, model)
    cfg.check_data(world_size, len(y_train))
    global_batch = world_size * cfg.batch_size
    steps_per_epoch = len(y_train) // global_batch
    micro = cfg.batch_size // cfg.accumulation
    history, step_bytes, timelines = [], [], []
    t_run = time.perf_counter()
    total_steps = cfg.epochs * steps_per_epoch
    for epoch in range(cfg.epochs):
        t_epoch = time.perf_counter()
        perm = torch.randperm(len(y_train), generator=torch.Generator().manual_seed(
            cfg.seed * 1000 + epoch))
        batch_losses = []
        for s in range(steps_per_epoch):
            idx = perm[s * global_batch:(s + 1) * global_batch]
            idx = idx[rank * cfg.batch_size:(rank + 1) * cfg.batch_size]
            before = mode.stats.bytes_sent if mode.stats is not None else 0
            mode.optimizer.zero_grad()
            step_loss, marks = 0.0, {}
            for i in range(cfg.accumulation):
                part = idx[i * micro:(i + 1) * micro]
                last = i == cfg.accumulation - 1
                quiet = not (last or cfg.sync_micro_batches)
                with mode.sync.no_sync() if quiet else contextlib.nullcontext():
                    out = mode.forward(x_train[part])
                    loss = F.cross_entropy(out, y_train[part]) / cfg.accumulation
                    if last:
                        out.register_hook(lambda g: _mark(marks, "backward_start"))
                    loss.backward()
                    if last:
                        marks["backward_returned"] = time.perf_counter()
                    mode.backward_done()
                step_loss += loss.item()
            if cfg.max_norm is not None:
                mode.clip(cfg.max_norm)
            mode.optimizer.step()
            batch_losses.append(step_loss)
            if mode.stats is not None:
                step_bytes.append(mode.stats.bytes_sent - before)
            if epoch == cfg.epochs - 1 and s >= steps_per_epoch - cfg.timeline_steps:
                timelines.append(_timeline(mode, marks))
            if progress is not None and rank == 0:
                progress.put(("step", cfg.mode, epoch * steps_per_epoch + s + 1, total_steps))
        train_loss, train_acc = _evaluate(model, x_train, y_train)
        test_loss, test_acc = _evaluate(model, x_test, y_test)
        record = {"epoch": epoch + 1, "batch_loss": sum(batch_losses) / len(batch_losses),
                  "train_loss": train_loss, "train_acc": train_acc, "test_loss": test_loss,
                  "test_acc": test_acc, "seconds": time.perf_counter() - t_epoch}
        history.append(record)
        if progress is not None and rank == 0:
            progress.put(("epoch", cfg.mode, record))
    seconds = time.perf_counter() - t_run
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    reference = flat.clone()
    dist.broadcast(reference, 0)
    differs = torch.tensor([float((flat != reference).sum())])
    dist.all_reduce(differs)
    result = {"mode": cfg.mode, "config": asdict(cfg), "world_size": world_size,
              "steps": total_steps, "steps_per_epoch": steps_per_epoch, "history": history,
              "final_train_loss": history[-1]["train_loss"],
              "final_test_acc": history[-1]["test_acc"], "seconds": seconds,
              "step_seconds": seconds / total_steps,
              "replicas_identical": differs.item() == 0,
              "parameters": flat.numel(),
              "optimizer_state_bytes": mode.state_bytes(),
              "bytes_per_step": (sum(step_bytes) / len(step_bytes)) if step_bytes else None,
              "bytes_by_collective": mode.stats.snapshot()["by_collective"] if mode.stats else None,
              "expected_bytes": _expected_bytes(cfg, model, world_size),
              "timeline": timelines}
    if mode.bucketer is not None:
        result["bucket_sizes"] = mode.bucketer.bucket_sizes()
    mode.close()
    return result


def _mark(marks: dict, key: str) -> None:
    marks.setdefault(key, time.perf_counter())  # returns None: a tensor hook keeps the grad


def _timeline(mode: _Mode, marks: dict) -> dict | None:
    """One step's buckets: compute until each bucket was ready, then its communication."""
    if mode.bucketer is not None and mode.bucketer.timeline:
        t = mode.bucketer.timeline[-1]
        out = t.as_dict()
    elif mode.hook is not None and mode.hook.events:
        events = list(mode.hook.events)
        start = marks.get("backward_start", float("nan"))
        mine = [e for e in events if e["launched"] >= start]
        buckets = [{"index": e["bucket"], "nbytes": e["nbytes"], "ready": e["launched"],
                    "launched": e["launched"], "started": e.get("started", float("nan")),
                    "done": e.get("done", float("nan"))} for e in mine]
        end = max((b["ready"] for b in buckets), default=start)
        done = marks.get("backward_returned", float("nan"))
        out = {"backward_start": start, "backward_end": end, "finish_done": done,
               "exposed_comm_s": done - end,
               "comm_s": sum(b["done"] - b["started"] for b in buckets), "buckets": buckets}
    else:
        return None
    # times relative to backward start, seconds
    t0 = out["backward_start"] if out["backward_start"] == out["backward_start"] else min(
        b["ready"] for b in out["buckets"])
    rel = {k: out[k] - t0 for k in ("backward_start", "backward_end", "finish_done")}
    rel.update(exposed_comm_s=out["exposed_comm_s"], comm_s=out["comm_s"])
    rel["buckets"] = [{**b, **{k: b[k] - t0 for k in ("ready", "launched", "started", "done")}}
                      for b in out["buckets"]]
    return rel


def train_worker(rank: int, world_size: int, configs: list, data: dict | None = None,
                 progress=None) -> list:
    """Body for :func:`ringccl.torch.launch.launch`: run each config (a dict of
    :class:`TrainConfig` fields) in turn on this rank.

    Args:
        configs: dicts of TrainConfig fields, one per run.
        data: :func:`load_digits`'s dict (None: load it here, with the first config's seed and
            test_size).
        progress: optional multiprocessing queue; rank 0 puts ("step", mode, done, total) and
            ("epoch", mode, record) tuples on it.

    Returns:
        one result dict per config (plain Python data).
    """
    cfgs = [TrainConfig(**{**c, "hidden": tuple(c.get("hidden", (256, 256)))}).validate()
            for c in configs]
    if data is None:
        data = load_digits(cfgs[0].seed, cfgs[0].test_size)
    return [_one_run(rank, world_size, cfg, data, progress) for cfg in cfgs]


def plot_training(results: list, path: str) -> str:
    """Loss curves of every run and the bucket timeline of one step, to ``path`` (PNG, SVG...).

    Left: full training-set loss after each epoch, per mode. Right: for the bucketer's run (else
    the first run with a timeline), the median recorded step's buckets: backward compute from
    its start until each bucket was ready (light) and the bucket's all-reduce (dark); the dashed
    line is the end of backward.

    Returns:
        ``path``.
    Raises:
        RingcclError: matplotlib is not installed.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RingcclError("plots need matplotlib: pip install 'ringccl[plot]'") from None
    fig, (ax_loss, ax_tl) = plt.subplots(1, 2, figsize=(13, 4.8))
    for r in results:
        epochs = [h["epoch"] for h in r["history"]]
        ax_loss.plot(epochs, [h["train_loss"] for h in r["history"]], marker=".",
                     label=f"{r['mode']} (test acc {r['final_test_acc']:.1%})")
    ax_loss.set_yscale("log")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("training-set cross-entropy")
    ax_loss.set_title(f"digits MLP on {results[0]['world_size']} gloo processes")
    ax_loss.legend()
    with_timeline = [r for r in results if any(r["timeline"])]
    # prefer the bucketer: its events are its own (DDP's hook sees buckets only when launched)
    run = next((r for r in with_timeline if r["mode"] == "bucketer"), None) or next(
        iter(with_timeline), None)
    if run is None:
        ax_tl.text(0.5, 0.5, "no bucket timeline\n(modes ddp and bucketer record one)",
                   ha="center", va="center", transform=ax_tl.transAxes)
        ax_tl.set_axis_off()
    else:
        steps = [t for t in run["timeline"] if t]
        t = sorted(steps, key=lambda t: t["finish_done"])[len(steps) // 2]
        ms = 1e3
        for b in t["buckets"]:
            y = b["index"]
            ax_tl.barh(y, (b["ready"] - t["backward_start"]) * ms, left=t["backward_start"] * ms,
                       color="#9ecae1", height=0.6,
                       label="backward compute until ready" if y == 0 else None)
            ax_tl.barh(y, (b["done"] - b["started"]) * ms, left=b["started"] * ms,
                       color="#08519c", height=0.6,
                       label="all-reduce (background)" if y == 0 else None)
            ax_tl.text(b["done"] * ms, y, f" {b['nbytes'] / 1024:.0f} KiB", va="center",
                       fontsize=8)
        ax_tl.axvline(t["backward_end"] * ms, color="k", ls="--", lw=1, label="backward ends")
        ax_tl.axvline(t["finish_done"] * ms, color="r", ls=":", lw=1, label="grads averaged")
        ax_tl.set_xlabel("ms since backward started")
        ax_tl.set_ylabel("bucket (launch order)")
        ax_tl.set_yticks([b["index"] for b in t["buckets"]])
        ax_tl.invert_yaxis()
        ax_tl.set_title(f"{run['mode']}: one step's buckets; exposed communication "
                        f"{t['exposed_comm_s'] * ms:.2f} ms")
        ax_tl.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format=image_format(path))
    plt.close(fig)
    return path
