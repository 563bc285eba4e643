"""ringccl ring all_reduce busbw next to gloo's own dist.all_reduce, on the same local processes.

The gloo case of bench_vs_builtin.py (see there): 1–64 MiB float32, 2 and 4 processes, median of
3 runs of busbw ratios measured in one run each.

    python benchmarks/bench_torch_ring.py [--nproc 2 4] [--runs 3] [--segments auto,0] [--json]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_vs_builtin import main  # noqa: E402

if __name__ == "__main__":
    sys.argv[1:1] = ["--backend", "gloo"]
    main()
