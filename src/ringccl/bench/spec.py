"""What ``ringccl bench`` and ``ringccl run`` measure: :class:`BenchSpec`, the size sweep and
nccl-tests' size and count conventions (backend-neutral, numpy only).

* **sizes** ``-b``, ``-e``, ``-f`` as nccl-tests: min, min·f, min·f², … up to max bytes. A size is
  nccl-tests' "size": the collective's whole buffer M (``Collective.buffer_count``), rounded
  down to whole elements and, for blocked collectives, to a multiple of world_size; "count" is
  the element count nccl-tests prints (M, or M / world_size when ``Collective.size_is_buffer``).
* **placements** as nccl-tests: out-of-place (input and output buffers distinct) and in-place
  (output aliases input: the same buffer for all_reduce; output = block ``rank`` of the input for
  reduce_scatter; input = block ``rank`` of the output for all_gather). An API that only works in
  place (``dist.all_reduce``) runs out-of-place as "copy the input to the output, then in place".
* ``ringccl run`` is a one-size spec (:func:`one_size`): one algorithm against the builtin, one
  placement, no calibration row.
"""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, field, replace

from ..algorithms import algorithms, get_algorithm
from ..args import check_rank
from ..collectives import get_collective
from ..errors import ArgumentError
from ..ops import check_accumulate_dtype, check_dtype, check_op_dtype, parse_op

__all__ = ["BUILTIN", "PLACEMENTS", "LOCAL_REDUCE", "NCCL_TYPE_NAMES", "BenchSpec",
           "parse_algorithms", "sweep_sizes", "buffer_elements", "nccl_count", "one_size",
           "run_count"]

#: the ``--algorithm`` name of the backend's own collective (MPI_Allreduce, dist.all_reduce, …)
BUILTIN = "builtin"
PLACEMENTS = ("out-of-place", "in-place")
#: the kind of the calibration rows (the backend's elementwise reduction alone)
LOCAL_REDUCE = "local-reduce"

#: nccl-tests' type names (``ncclDataType_t`` spelled as the tests print them)
NCCL_TYPE_NAMES = {"float16": "half", "float32": "float", "float64": "double", "int8": "int8",
                   "uint8": "uint8", "int16": "int16", "int32": "int32", "int64": "int64",
                   "bool": "bool"}


@dataclass(frozen=True)
class BenchSpec:
    """What one ``ringccl bench`` run measures (JSON-serializable with ``asdict``).

    Attributes:
        collective: a name from ``ringccl.collectives()``.
        algorithms: registered algorithm names and/or ``"builtin"``, in report order.
        min_bytes, max_bytes, factor: the size sweep (nccl-tests ``-b``, ``-e``, ``-f``).
        iters, warmup: timed and untimed iterations per row (nccl-tests ``-n``, ``-w``).
        check: count wrong elements (nccl-tests ``-c``).
        dtype: numpy dtype name; op: reduce op name; root: root rank of rooted collectives.
        segment_bytes: pipelining settings for ringccl algorithms, one sweep each (None = the
            executor's automatic choice, 0 = never split).
        placements: a subset of :data:`PLACEMENTS`.
        backend: "gloo", "nccl" or "mpi" (for the report).
        calibrate: add a ``local-reduce`` row per size for reducing collectives.
        restore: ringccl.torch's all-or-nothing backup (``restore=``, default True); False
            measures what the backends' own collectives promise (contents undefined on failure).
        accumulate_dtype: ringccl algorithms of reducing collectives reduce in this wider
            floating dtype (``accumulate_dtype=`` of ringccl.torch and ringccl.mpi; what travels
            is then its bytes); size, algbw and busbw still count the buffer in ``dtype``, so
            the rows compare with the builtin's as a user sees them. None: reduce in ``dtype``.
        params: further builder parameters of ringccl's algorithms (``segments``, the ``root``
            of an algorithm of an unrooted collective, ...), passed to their functions as
            keywords; the builtin ignores them. The root of a rooted collective is ``root``.
    """

    collective: str
    algorithms: tuple[str, ...] = ("ring", BUILTIN)
    min_bytes: int = 4 << 10
    max_bytes: int = 64 << 20
    factor: int = 4
    iters: int = 20
    warmup: int = 5
    check: bool = True
    dtype: str = "float32"
    op: str = "sum"
    root: int = 0
    segment_bytes: tuple[int | None, ...] = (None,)
    placements: tuple[str, ...] = PLACEMENTS
    backend: str = "gloo"
    calibrate: bool = True
    restore: bool = True
    accumulate_dtype: str | None = None
    params: dict = field(default_factory=dict)

    def validate(self, world_size: int | None = None) -> "BenchSpec":
        """Raise ArgumentError/ArgumentTypeError for a bad field (before any process starts);
        returns the spec, with ``accumulate_dtype`` normalized to its name ("f4" -> "float32")."""
        spec = get_collective(self.collective)
        dtype = check_dtype(self.dtype)
        op = parse_op(self.op)
        if spec.reduces:
            check_op_dtype(op, dtype)
        parse_algorithms(self.collective, ",".join(self.algorithms))
        if self.min_bytes < 0 or self.max_bytes < self.min_bytes:
            raise ArgumentError(f"sizes must satisfy 0 <= min_bytes <= max_bytes, got "
                                f"min_bytes={self.min_bytes}, max_bytes={self.max_bytes}")
        if isinstance(self.factor, bool) or not isinstance(self.factor, numbers.Integral):
            raise ArgumentError(f"factor={self.factor!r} must be an integer >= 2 (nccl-tests' "
                                "-f), so that every size is whole bytes")
        if self.factor < 2:
            raise ArgumentError(f"factor={self.factor} must be >= 2")
        if self.iters < 1:
            raise ArgumentError(f"iters={self.iters} must be an integer >= 1")
        if self.warmup < 0:
            raise ArgumentError(f"warmup={self.warmup} must be an integer >= 0")
        bad = [p for p in self.placements if p not in PLACEMENTS]
        if bad or not self.placements:
            raise ArgumentError(f"placements={list(self.placements)} must be a non-empty subset "
                                f"of {list(PLACEMENTS)}")
        if self.collective == "all_to_all" and self.backend != "mpi" and \
                "in-place" in self.placements:
            # torch.distributed's all_to_all_single has no in-place form (MPI's has)
            raise ArgumentError("placement 'in-place' does not apply to all_to_all on "
                                f"{self.backend}: all_to_all_single needs separate input and "
                                "output tensors; use --placement out-of-place")
        for s in self.segment_bytes:
            if s is not None and s < 0:
                raise ArgumentError(f"segment_bytes={s} must be >= 0 (0 = never split)")
        if world_size is not None and _is_rooted(spec):
            check_rank(self.root, world_size, "root")
        if not (isinstance(self.params, dict) and all(isinstance(k, str) for k in self.params)):
            raise ArgumentError(f"params={self.params!r} must be a dict of builder parameter "
                                "names to values")
        if _is_rooted(spec) and "root" in self.params:
            raise ArgumentError(f"params={self.params!r}: the root of {self.collective} is the "
                                f"spec's root field (root={self.root}), not a parameter")
        acc = check_accumulate_dtype(self.accumulate_dtype, dtype, self.collective, spec.reduces)
        if acc is not None and self.backend == "mpi" and self.collective == "reduce":
            raise ArgumentError(f"accumulate_dtype={acc} with backend 'mpi': ringccl.mpi "
                                "accumulates in all_reduce and reduce_scatter only, not reduce")
        return self if acc == self.accumulate_dtype else replace(self, accumulate_dtype=acc)

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "BenchSpec":
        d = dict(d)
        for key in ("algorithms", "segment_bytes", "placements"):
            if key in d:
                d[key] = tuple(d[key])
        if "params" in d:
            d["params"] = dict(d["params"])
        return BenchSpec(**d)


def _is_rooted(spec) -> bool:
    return bool(getattr(spec, "root_arg", None))


def parse_algorithms(collective: str, text: str) -> tuple[str, ...]:
    """``"ring,builtin"`` -> ("ring", "builtin"); ``"all"`` = every registered algorithm + builtin.

    Raises:
        ArgumentError: an unknown name (the message lists the registered ones).
    """
    names = [t.strip() for t in str(text).split(",") if t.strip()]
    if names == ["all"]:
        return tuple(algorithms(collective)) + (BUILTIN,)
    if not names:
        raise ArgumentError(f"algorithm={text!r} names no algorithm; expected a comma-separated "
                            f"list from {', '.join(algorithms(collective) + [BUILTIN])}")
    for name in names:
        if name != BUILTIN:
            get_algorithm(collective, name)  # unknown -> ArgumentError listing the valid names
    return tuple(dict.fromkeys(names))


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """nccl-tests' sizes: min, min·factor, … while <= max (min = 0 gives just 0)."""
    if min_bytes == 0:
        return [0]
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= factor
    return out


def buffer_elements(collective: str, size_bytes: int, itemsize: int, world_size: int) -> int:
    """M, the collective's buffer in elements, for nccl-tests' ``size`` in bytes (rounded down;
    to a multiple of world_size when the buffer is made of world_size blocks)."""
    m = size_bytes // itemsize
    if get_collective(collective).size_is_buffer:
        m -= m % world_size
    return m


def nccl_count(collective: str, m: int, world_size: int) -> int:
    """The count nccl-tests prints: M, or elements per rank block when size is the buffer."""
    return m // world_size if get_collective(collective).size_is_buffer else m




#: collectives whose torch.distributed API works in place only (``dist.all_reduce(tensor)``):
#: ``ringccl run`` times them in place, the others out of place, as a user calls them
_IN_PLACE_APIS = ("all_reduce", "broadcast", "reduce")


def run_count(collective: str, count: int, world_size: int) -> int:
    """``ringccl run``'s ``count`` as measured: elements of one rank's input, or of the whole
    N-block input for reduce_scatter and scatter, rounded down to a multiple of world_size for
    those and all_to_all (whose input is N blocks)."""
    spec = get_collective(collective)
    if spec.size_is_buffer and spec.buffer_count(world_size, 1) == 1:
        return count - count % world_size
    return count


def one_size(collective: str, algorithm: str, count: int, world_size: int, *,
             dtype: str = "float32", op: str = "sum", iters: int = 10, warmup: int = 3,
             params: dict | None = None, accumulate_dtype: str | None = None,
             backend: str = "gloo") -> BenchSpec:
    """The spec ``ringccl run`` measures: ``algorithm`` and the builtin at one size.

    Args:
        count: elements per rank as :func:`run_count` reads them (>= 0).
        params: the algorithm's builder parameters; ``root`` is the src/dst of a rooted
            collective (default 0) and, for an unrooted one, a parameter of its algorithm.
    Returns:
        a spec with ``min_bytes == max_bytes`` = the collective's buffer M in bytes, one
        placement (in place for the in-place-only APIs, else out of place), no calibration row.
    Raises:
        ArgumentError: as :meth:`BenchSpec.validate`.
    """
    coll = get_collective(collective)
    params = dict(params or {})
    root = int(params.pop("root", 0)) if _is_rooted(coll) else 0
    m = coll.buffer_count(world_size, run_count(collective, count, world_size))
    nbytes = m * check_dtype(dtype).itemsize
    placement = "in-place" if collective in _IN_PLACE_APIS else "out-of-place"
    return BenchSpec(collective, (algorithm, BUILTIN), nbytes, nbytes, 4, iters, warmup, True,
                     dtype, op, root, (None,), (placement,), backend, False, True,
                     accumulate_dtype, params).validate(world_size)
