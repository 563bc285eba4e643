"""Fuzz the simulator: >= 10,000 hypothesis examples of tests/fuzzing.py's strategy (every
collective × registered algorithm × op × dtype × world size 1…64 × count 0…10,000, roots,
segments, uneven all_to_all splits) against its independent numpy reference.

Unlike the CI test (tests/test_fuzz.py) a mismatch does not stop the run: every case is counted
per collective, mismatches and exceptions are listed, and the exit status is 1 if any occurred.

    python benchmarks/fuzz_sim.py [--examples 10000] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's tests package
from tests.fuzzing import MAX_COUNT, MAX_ELEMENTS, MAX_WORLD_SIZE, fuzz_cases, run_case  # noqa

import ringccl  # noqa: E402


def fuzz(examples: int, seed_value: int, progress=None) -> dict:
    """Run ``examples`` cases; returns counts per collective and the failures."""
    cases, mismatched, failures, elements = Counter(), Counter(), [], 0
    algos, sizes, counts = Counter(), Counter(), Counter()

    @seed(seed_value)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(fuzz_cases())
    def one(case):
        nonlocal elements
        cases[case.collective] += 1
        algos[case.collective, case.algorithm] += 1
        elements += case.world_size * case.count
        n, c = case.world_size, case.count
        sizes["1-8" if n <= 8 else "9-32" if n <= 32 else "33-64"] += 1
        counts["0" if c == 0 else "1-100" if c <= 100 else "101-1000" if c <= 1000
               else "1001-10000"] += 1
        try:
            problems = run_case(case)
        except Exception:  # noqa: BLE001 - a crash is a finding too
            problems = ["exception: " + traceback.format_exc(limit=3).strip().splitlines()[-1]]
        if problems:
            mismatched[case.collective] += 1
            failures.append({"case": repr(case), "problems": problems[:5]})
        if progress is not None:
            progress()

    one()
    return {"cases": dict(cases), "mismatches": dict(mismatched), "failures": failures,
            "algorithms": {f"{c}/{a}": k for (c, a), k in sorted(algos.items())},
            "input_elements": elements, "world_sizes": dict(sorted(sizes.items())),
            "counts": dict(sorted(counts.items(), key=lambda kv: len(kv[0])))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=10_000, help="hypothesis examples to run")
    p.add_argument("--seed", type=int, default=0, help="hypothesis seed (reproducible runs)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    if args.examples < 1:
        p.error(f"--examples={args.examples} must be >= 1")

    t0 = time.perf_counter()
    if args.json:
        result = fuzz(args.examples, args.seed)
    else:
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)
        with Progress(TextColumn("fuzzing the simulator"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TimeRemainingColumn()) as bar:
            task = bar.add_task("fuzz", total=args.examples)
            result = fuzz(args.examples, args.seed, lambda: bar.advance(task))
    result["seconds"] = round(time.perf_counter() - t0, 1)
    result["examples"] = sum(result["cases"].values())
    result["seed"] = args.seed
    result["limits"] = {"world_size": MAX_WORLD_SIZE, "count": MAX_COUNT,
                        "storage_elements": MAX_ELEMENTS}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table
        table = Table(title=f"simulator fuzz: {result['examples']:,} cases, seed {args.seed}, "
                            f"{result['seconds']:.0f} s")
        table.add_column("collective")
        table.add_column("algorithms", justify="right")
        table.add_column("cases", justify="right")
        table.add_column("mismatches", justify="right")
        for c in ringccl.collectives():
            n_alg = sum(1 for k in result["algorithms"] if k.startswith(c + "/"))
            table.add_row(c, str(n_alg), f"{result['cases'].get(c, 0):,}",
                          str(result["mismatches"].get(c, 0)))
        table.add_row("total", str(len(result["algorithms"])), f"{result['examples']:,}",
                      str(sum(result["mismatches"].values())))
        console = Console()
        console.print(table)
        console.print(f"world sizes: {result['world_sizes']}; counts: {result['counts']}; "
                      f"{result['input_elements']:,} input elements in all")
        for f in result["failures"][:20]:
            console.print(f"[red]{f['case']}[/red]\n  " + "\n  ".join(f["problems"]))
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
