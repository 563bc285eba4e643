"""Build and verify speed of every registered algorithm, and the checker sweep the tests run.

For each (collective, algorithm) and N: transfers in the schedule, seconds to build it and
seconds for ``ringccl.verify``; then the total of verifying every N in 1…256 (what
tests/test_algorithms.py does), per algorithm. Figures only, no thresholds.

    python benchmarks/bench_algorithms.py [--sizes 64,256,1024] [--no-sweep] [--json]
"""

from __future__ import annotations

import argparse
import inspect
import json
import time

import ringccl
from ringccl.algorithms import REGISTRY
from ringccl.algorithms.registry import _build_cached


def _params(key, n):
    return {"root": 0} if "root" in inspect.signature(REGISTRY[key].builder).parameters else {}


def _timed(fn):
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,256,1024")
    parser.add_argument("--no-sweep", action="store_true", help="skip the N = 1…256 sweep")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for key in REGISTRY:
        for n in sizes:
            _build_cached.cache_clear()
            s, build = _timed(lambda: ringccl.schedule(*key, world_size=n, **_params(key, n)))
            _, check = _timed(lambda: ringccl.verify(s))
            rows.append({"collective": key[0], "algorithm": key[1], "world_size": n,
                         "steps": s.num_steps, "transfers": s.num_transfers,
                         "build_s": build, "verify_s": check})
    sweep = []
    if not args.no_sweep:
        for key in REGISTRY:
            t0 = time.perf_counter()
            for n in range(1, 257):
                ringccl.verify(ringccl.schedule(*key, world_size=n, **_params(key, n)))
            sweep.append({"collective": key[0], "algorithm": key[1],
                          "verify_1_to_256_s": time.perf_counter() - t0})
    if args.json:
        print(json.dumps({"rows": rows, "sweep": sweep}, indent=2))
        return
    print(f"{'collective':<15}{'algorithm':<20}{'N':>6}{'steps':>8}{'transfers':>12}"
          f"{'build (s)':>11}{'verify (s)':>12}")
    for r in rows:
        print(f"{r['collective']:<15}{r['algorithm']:<20}{r['world_size']:>6}{r['steps']:>8}"
              f"{r['transfers']:>12,}{r['build_s']:>11.3f}{r['verify_s']:>12.3f}")
    if sweep:
        print("\nverify every N in 1…256:")
        for r in sweep:
            print(f"  {r['collective']:<15}{r['algorithm']:<20}{r['verify_1_to_256_s']:>8.2f} s")
        print(f"  total{'':<30}{sum(r['verify_1_to_256_s'] for r in sweep):>8.2f} s")


if __name__ == "__main__":
    main()
