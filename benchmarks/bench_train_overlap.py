"""Does overlapping bucket all-reduces with backward pay off, and what does a step send?

On N local gloo processes, one MLP, one synthetic batch per step, the same buckets every time:

* ``compute``     forward + backward + SGD step, no communication (the floor);
* ``overlap``     GradientBucketer: each bucket all-reduced in the background once full;
* ``after``       the same buckets, all-reduced one after another once backward is done;
* ``ddp-hook``    DistributedDataParallel + ringccl.torch.comm_hook;
* ``ddp-gloo``    DistributedDataParallel with gloo's own all-reduce;
* ``zero``        ShardedOptimizer (reduce-scatter at the end of backward, all-gather after step).

Reported per variant: median step time (each step's time is the max over ranks), exposed
communication (time from the end of backward until the averaged gradients are in place; for
zero, the reduce-scatter + all-gather time), and bytes each rank sent per step, measured from
the schedules, against the closed forms 2(N-1)/N x gradient bytes (all-reduce) and
(N-1)/N x padded bytes twice (reduce-scatter + all-gather).

Usage: python benchmarks/bench_train_overlap.py [--nproc 4] [--width 1024] [--depth 6] [--json]
Figures depend on the machine: on few shared cores, the background thread competes with
backward for the same CPUs and overlap can gain little.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


def _model(width: int, depth: int, inputs: int = 256, classes: int = 10):
    torch.manual_seed(0)
    layers, w = [], inputs
    for _ in range(depth):
        layers += [torch.nn.Linear(w, width), torch.nn.ReLU()]
        w = width
    layers.append(torch.nn.Linear(w, classes))
    return torch.nn.Sequential(*layers)


def _sync_time(seconds: list[float]) -> list[float]:
    """Per-step max over ranks (a step lasts until its slowest rank is done)."""
    t = torch.tensor(seconds, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


class _Variant:
    """One variant's model, optimizer and synchronization, and its per-step measurements."""

    def __init__(self, name, rank, args):
        import ringccl.torch as rt
        from torch.nn.parallel import DistributedDataParallel as DDP

        self.name = name
        self.model = _model(args.width, args.depth)
        self.forward, self.bucketer, self.stats, self.hook = self.model, None, None, None
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        if name in ("overlap", "after"):
            self.bucketer = rt.GradientBucketer(self.model, args.bucket_cap_mb,
                                                args.first_bucket_mb, overlap=name == "overlap")
            self.stats = self.bucketer.stats
        elif name in ("ddp-hook", "ddp-gloo"):
            self.forward = DDP(self.model, bucket_cap_mb=args.bucket_cap_mb)
            if name == "ddp-hook":
                self.hook = rt.comm_hook()
                self.forward.register_comm_hook(None, self.hook)
                self.stats = self.hook.stats
        elif name == "zero":
            self.optimizer = rt.ShardedOptimizer(self.model.parameters(), torch.optim.SGD, lr=1e-3)
            self.stats = self.optimizer.stats
        self.step_s, self.backward_s, self.exposed_s, self.sent = [], [], [], []

    def step(self, x, y, record: bool) -> None:
        before = self.stats.bytes_sent if self.stats else 0
        dist.barrier()
        t0 = time.perf_counter()
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.forward(x), y)
        t_forward = time.perf_counter()
        loss.backward()
        t_backward = time.perf_counter()
        if self.bucketer is not None:
            self.bucketer.finish()
        t_grads = time.perf_counter()
        self.optimizer.step()
        t1 = time.perf_counter()
        if not record:
            return
        nan = float("nan")
        self.step_s.append(t1 - t0)
        if self.bucketer is not None:
            self.backward_s.append(t_backward - t_forward)
            self.exposed_s.append(t_grads - t_backward)
        elif self.hook is not None:  # DDP waits for the buckets inside backward
            last = max(e["launched"] for e in self.hook.events if e["launched"] >= t_forward)
            self.backward_s.append(last - t_forward)
            self.exposed_s.append(t_backward - last)
        else:
            self.backward_s.append(t_backward - t_forward if self.name == "compute" else nan)
            self.exposed_s.append(nan)
        self.sent.append((self.stats.bytes_sent - before) if self.stats else nan)

    def result(self) -> dict:
        def med(values):
            values = _sync_time(values)
            m = statistics.median(values)
            return None if m != m else m

        out = {"variant": self.name, "step_s": med(self.step_s),
               "backward_s": med(self.backward_s), "exposed_s": med(self.exposed_s),
               "bytes_per_step": statistics.median(self.sent) if self.stats else None,
               "grad_bytes": sum(p.numel() * p.element_size() for p in self.model.parameters()),
               "buckets": self.bucketer.buckets if self.bucketer is not None else None}
        if self.bucketer is not None:
            self.bucketer.remove()
        if self.hook is not None:
            self.hook.communicator.close()
        if self.name == "zero":
            self.optimizer.remove()
        return out


def worker(rank, world_size, args):
    """Build every variant, then run their steps round-robin, so that load changes on a shared
    machine hit all variants alike."""
    args = argparse.Namespace(**args)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, 256, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    variants = [_Variant(name, rank, args) for name in args.variants]
    for i in range(args.warmup + args.steps):
        for v in variants:
            v.step(x, y, record=i >= args.warmup)
    return [v.result() for v in variants]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--batch", type=int, default=64, help="samples per rank")
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--bucket-cap-mb", type=float, default=4.0)
    parser.add_argument("--first-bucket-mb", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads per process")
    parser.add_argument("--variants", default="compute,overlap,after,ddp-hook,ddp-gloo,zero")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from ringccl.torch.launch import launch

    options = dict(vars(args), variants=args.variants.split(","))
    rows = launch(worker, args.nproc, options, timeout=1200, threads=args.threads)[0]
    n = args.nproc
    grad_bytes = rows[0]["grad_bytes"]
    params = grad_bytes // 4
    padded = -(-params // n) * n * 4
    closed = {"all_reduce": 2 * (n - 1) / n * grad_bytes,
              "zero": 2 * (n - 1) / n * padded}
    compute = next((r["step_s"] for r in rows if r["variant"] == "compute"), None)
    for r in rows:
        model = closed["zero"] if r["variant"] == "zero" else closed["all_reduce"]
        r["closed_form_bytes"] = model if r["variant"] != "compute" else 0
        r["comm_overhead_s"] = None if compute is None else r["step_s"] - compute
    if args.json:
        print(json.dumps({"nproc": n, "grad_bytes": grad_bytes, "rows": rows}, indent=2))
        return 0
    print(f"MLP {args.depth}x{args.width} ({params:,} parameters, {grad_bytes / 2**20:.1f} MiB of "
          f"fp32 gradients) on {n} gloo processes, batch {args.batch}/rank, buckets "
          f"{args.first_bucket_mb:g}/{args.bucket_cap_mb:g} MiB; medians of {args.steps} steps")
    header = (f"{'variant':<10}{'step ms':>10}{'over compute':>14}{'backward ms':>13}"
              f"{'exposed comm ms':>17}{'sent/step MiB':>15}{'closed form MiB':>17}{'ratio':>8}")
    print(header)
    def ms(value, sign=""):
        return "-" if value is None else f"{value * 1e3:{sign}.1f}"

    for r in rows:
        sent, closed_b = r["bytes_per_step"], r["closed_form_bytes"]
        ratio = f"{sent / closed_b:.4f}" if sent and closed_b else "-"
        print(f"{r['variant']:<10}{ms(r['step_s']):>10}{ms(r['comm_overhead_s'], '+'):>14}"
              f"{ms(r['backward_s']):>13}{ms(r['exposed_s']):>17}"
              f"{'-' if sent is None else f'{sent / 2**20:.3f}':>15}"
              f"{closed_b / 2**20:>17.3f}{ratio:>8}")
    print("backward: loss.backward() (ddp-hook: until its last bucket was launched); exposed "
          "comm: from then until the averaged grads are in place. zero: see step time.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
