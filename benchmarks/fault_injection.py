"""Kill (or stall) one rank mid-collective, many times: do all survivors raise a named error?

Each trial forks 3 or 4 local gloo processes, picks a registered (collective, algorithm), a
victim rank and a step at random, and makes the victim exit (or, every 10th trial, stall) when it
posts its first operation of that step (tests/distributed/faults.py). A trial passes when every
survivor raised PeerError/RingcclTimeout naming the collective, algorithm, step and peer within
the group timeout + 5 s of the failure, left its tensors exactly as they were, and every call
that returned gave gloo's result. Prints a table per (collective, algorithm) and the slowest
detection; ``--json`` for the raw outcomes.

    python benchmarks/fault_injection.py [--trials 60] [--seed 0] [--timeout 4] [--json]
        [--transport p2p|shm]

``--transport shm``: the collectives run over shared memory; kills alternate between
``os._exit`` and SIGKILL, stalls are SIGSTOP, and every trial also checks that none of its
segments is left in the shared-memory directory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rich.console import Console  # noqa: E402
from rich.progress import track  # noqa: E402

from ringccl.cli.common import add_format_option, table  # noqa: E402
from tests.distributed import faults  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=4.0, help="group timeout, seconds")
    parser.add_argument("--json", action="store_true")
    add_format_option(parser)
    parser.add_argument("--transport", choices=("p2p", "shm"), default="p2p")
    args = parser.parse_args()

    trials = faults.trials(args.seed, args.trials, transport=args.transport)
    for t in trials:
        t.timeout = args.timeout
    outcomes = [faults.run(t) for t in track(trials, description="trials",
                                             console=Console(stderr=True),
                                             disable=args.json)]
    if args.json:
        print(json.dumps([o.as_dict() for o in outcomes], indent=1, default=str))
        return
    rows: dict = defaultdict(lambda: [0, 0, 0, 0.0])  # trials, passed, survivors, slowest
    for o in outcomes:
        row = rows[(o.trial.collective, o.trial.algorithm)]
        row[0] += 1
        row[1] += not o.problems
        row[2] += len(o.survivors)
        for rec in o.survivors.values():
            if rec.get("error") and o.died_at is not None:
                row[3] = max(row[3], rec["error"]["at"] - o.died_at)
    # the CLI's table: no name or number is ever cut, whatever the terminal
    table(f"{len(outcomes)} fault-injection trials over {args.transport} "
          f"(group timeout {args.timeout:g} s)",
          ("collective", "algorithm", "trials", "passed", "survivors", "slowest detection (s)"),
          [(collective, algorithm, n, ok, surv, f"{slow:.2f}")
           for (collective, algorithm), (n, ok, surv, slow) in sorted(rows.items())],
          args.format)
    console = Console()
    failed = [o for o in outcomes if o.problems]
    hangs = sum(bool(o.missing) for o in outcomes)
    kills = sum(o.trial.mode in ("kill", "sigkill") for o in outcomes)
    console.print(f"trials: {len(outcomes)} ({kills} kills, {len(outcomes) - kills} stalls); "
                  f"passed: {len(outcomes) - len(failed)}; hangs: {hangs}")
    for o in failed:
        console.print(f"[red]FAILED[/red] {o.trial}: {o.problems}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
