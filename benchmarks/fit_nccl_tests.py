"""Held-out error of NCCL's network fitted to nccl-tests logs: half the sizes predict the others.

For every log given (nccl-tests output as printed; default: tests/data/nccl_tests/*.log), fit
NCCL's model (``ringccl.costmodel.nccl_fit``) on the log's even-numbered sizes alone and predict
its odd-numbered ones; then the same with every log of one machine fitted together (the
profile ``ringccl fit`` writes). Printed: the median and worst |relative error| per log and
overall. Figures only, no thresholds (the test ``tests/test_nccl_fit.py`` holds the acceptance
bound). Run it on your own cluster's logs to see how far the model carries there:

    python benchmarks/fit_nccl_tests.py [LOG ...] [--machine dgx-h100] [--min-size 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics

from ringccl import units
from ringccl.costmodel.fit import load_rows
from ringccl.costmodel.nccl_fit import held_out_network

DEFAULT = sorted(str(p) for p in (pathlib.Path(__file__).resolve().parents[1] / "tests" / "data"
                                  / "nccl_tests").glob("*.log"))


def _summary(errors: list[float]) -> dict:
    e = [abs(x) for x in errors]
    return {"sizes": len(e), "median_abs_error": statistics.median(e) if e else None,
            "max_abs_error": max(e) if e else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="*", default=DEFAULT)
    parser.add_argument("--machine", help="NCCL machine preset (default: from the devices)")
    parser.add_argument("--placement", default="in-place",
                        choices=["in-place", "out-of-place", "any"])
    parser.add_argument("--min-size", default="0", help="held-out sizes from this (bytes)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    placement = None if args.placement == "any" else args.placement
    min_size = units.size(args.min_size)
    report = {"alone": {}, "together": {}}
    rows_by_device: dict[str, list] = {}
    for log in args.logs:
        rows = load_rows([log])
        rows_by_device.setdefault(rows[0].get("device", ""), []).extend(rows)
        held = held_out_network(rows, args.machine, placement)
        report["alone"][log] = _summary(list(held.errors(min_size)))
    for device, rows in rows_by_device.items():
        held = held_out_network(rows, args.machine, placement)
        per_log = {name: _summary([e for s, _, _, e, _ in pts if s >= min_size])
                   for name, pts in held.logs.items()}
        report["together"][device] = {"all": _summary(list(held.errors(min_size))),
                                      "logs": per_log,
                                      "machine": held.fit.machine.describe()}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"held-out |error| (fit on even-numbered sizes, predict the others; sizes >= "
          f"{units.format_size(min_size)})")
    print("\nEach log fitted alone:")
    for log, s in report["alone"].items():
        print(f"  {pathlib.Path(log).name:<44} median {100 * s['median_abs_error']:5.1f}%  "
              f"worst {100 * s['max_abs_error']:5.1f}%  ({s['sizes']} sizes)")
    for device, t in report["together"].items():
        print(f"\nEvery log of {device or 'an unnamed device'} fitted together "
              f"({t['machine']}):")
        for log, s in t["logs"].items():
            print(f"  {pathlib.Path(log).name:<44} median {100 * s['median_abs_error']:5.1f}%  "
                  f"worst {100 * s['max_abs_error']:5.1f}%")
        a = t["all"]
        print(f"  {'all':<44} median {100 * a['median_abs_error']:5.1f}%  "
              f"worst {100 * a['max_abs_error']:5.1f}%  ({a['sizes']} sizes)")


if __name__ == "__main__":
    main()
