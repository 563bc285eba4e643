"""What ringccl adds to the start of a Python process, interleaved against a baseline.

torch runs ringccl's ``torch.backends`` entry point (``ringccl.torch_autoload``) inside every
``import torch`` once ringccl is installed; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns torch's
entry points off, which is the baseline of the same run. Also timed: ``import ringccl``,
``import numpy`` (the first thing a ringccl command needs) and ``ringccl --version``.
Each round runs every case once, in a fresh interpreter; medians and minima over the rounds.

    python benchmarks/bench_import.py              # 15 rounds
    python benchmarks/bench_import.py --rounds 30 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CASES = {
    "import torch (ringccl's entry point off)": (["-c", "import torch"],
                                                 {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}),
    "import torch (ringccl's entry point on)": (["-c", "import torch"], {}),
    "python (nothing imported)": (["-c", "pass"], {}),
    "import numpy": (["-c", "import numpy"], {}),
    "import ringccl": (["-c", "import ringccl"], {}),
    "ringccl --version": (["-m", "ringccl", "--version"], {}),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be >= 1, got {args.rounds}")
    times: dict[str, list[float]] = {name: [] for name in CASES}
    torch = subprocess.run([sys.executable, "-c", "import torch"],
                           capture_output=True).returncode == 0
    for r in range(args.rounds):
        for name, (cmd, env) in CASES.items():
            if "torch" in name and not torch:
                continue
            t0 = time.perf_counter()
            subprocess.run([sys.executable, *cmd], env={**os.environ, **env}, check=True,
                           stdout=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - t0)
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr, end="\r", flush=True)
    print(file=sys.stderr)
    rows = [{"case": n, "median_ms": 1e3 * statistics.median(t), "min_ms": 1e3 * min(t),
             "rounds": len(t)} for n, t in times.items() if t]
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
        return 0
    width = max(len(r["case"]) for r in rows)
    print(f"{'case':<{width}}  {'median ms':>10}  {'min ms':>10}")
    for row in rows:
        print(f"{row['case']:<{width}}  {row['median_ms']:>10.1f}  {row['min_ms']:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
