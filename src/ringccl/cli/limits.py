"""The command line's flags that size a schedule, in the form
:func:`ringccl.algorithms.bounded.build` names them when it refuses one."""

from __future__ import annotations

__all__ = ["size_flags"]


def size_flags(args, world: str = "-N/--world-size", value=None) -> tuple[str, str]:
    """The flags that size a schedule, as given and as names: ``("-N/--world-size 10000
    --segments 8", "-N/--world-size or --segments")``. ``world``: the world size's flag
    (``-n/--nproc`` for commands that start processes, ``--topology``), ``value``: its value
    (default ``args.world_size``)."""
    value = args.world_size if value is None else value
    given, names = [f"{world} {value}"], [world]
    if getattr(args, "segments", None) is not None:
        given.append(f"--segments {args.segments}")
        names.append("--segments")
    for item in getattr(args, "param", None) or ():
        given.append(f"--param {item}")
        if "--param" not in names:
            names.append("--param")
    return " ".join(given), " or ".join(names)
