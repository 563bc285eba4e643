"""ringccl ring all_reduce over MPI (ringccl.mpi) next to MPI_Allreduce at its best.

The MPI case of bench_vs_builtin.py (see there): 1–64 MiB float32, 2 and 4 processes, median of
3 runs of busbw ratios measured in one run each, MPI_Allreduce at the faster of in place and out
of place.

    python benchmarks/bench_mpi.py [--nproc 2 4] [--runs 3] [--segments auto,0] [--json]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_vs_builtin import main  # noqa: E402

if __name__ == "__main__":
    sys.argv[1:1] = ["--backend", "mpi"]
    main()
