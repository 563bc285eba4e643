"""A stand-in for ``ringccl run/bench`` in the launch safety tests: ``python launcher_script.py
torch DIR NPROC`` launches NPROC torch workers that write their pid into DIR and sleep;
``python launcher_script.py mpi NPROC [silent]`` runs a long MPI bench sweep. Like the CLI, it prints one
line and exits 130 on an interrupt."""

import os
import sys
import time


def sleeper(rank: int, world_size: int, directory: str, progress) -> None:
    progress.put(f"rank {rank} started")
    with open(os.path.join(directory, f"{os.getpid()}.pid"), "w") as f:
        f.write(str(rank))
    time.sleep(600)


def main() -> int:
    from ringccl.errors import Interrupted
    kind = sys.argv[1]
    try:
        if kind == "torch":
            from ringccl.torch.launch import launch
            directory, nproc = sys.argv[2], int(sys.argv[3])
            launch(sleeper, nproc, directory, timeout=600,
                   on_progress=lambda item: print(item, flush=True))
        else:
            from ringccl.bench import BenchSpec
            from ringccl.backends.mpi.launch import launch_bench
            # small rows first (they arrive within a second), then rows that take minutes;
            # "silent": no row for minutes (nothing written to a closed pipe ends mpirun)
            silent = sys.argv[3:] == ["silent"]
            spec = BenchSpec(collective="all_reduce", algorithms=("ring",), min_bytes=1 << 10,
                             max_bytes=16 << 20, iters=10 ** 7 if silent else 2000, warmup=0,
                             check=False, calibrate=False, placements=("out-of-place",),
                             backend="mpi")
            launch_bench(spec, int(sys.argv[2]), lambda row: print("row", flush=True))
    except Interrupted as exc:
        print(f"interrupted: {exc} ({len(exc.partial)} items received)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
