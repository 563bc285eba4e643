"""Bad arguments, at every entry point: each raises ArgumentError (ValueError) or
ArgumentTypeError (TypeError) whose message names the argument and the offending value, before
any data moves; a refused call leaves the caller's arrays and tensors bit-identical.

Entry points: the simulator and schedule layer (ringccl.schedule, simulate, cost, tune, verify,
Schedule methods, chunk_bounds), ringccl.torch on a 1-rank gloo group in this process,
ringccl.mpi on COMM_WORLD of size 1 in this process, and the ringccl command (exit code 2).
Multi-rank refusals (every rank refuses alike, nothing hangs) are in
tests/distributed/test_bad_input_torch.py.
"""

import importlib.util
import re

import numpy as np
import pytest

import ringccl
from ringccl.args import check_int, check_rank, lookup
from ringccl.cli import main
from ringccl.errors import ArgumentError, ArgumentTypeError

from .gloo_group import one_rank_gloo_group

E, T = ArgumentError, ArgumentTypeError
X = np.arange(32, dtype=np.float32).reshape(4, 8)   # 4 ranks, 8 elements each
XI = np.arange(32, dtype=np.int32).reshape(4, 8)
FLAT = dict(alpha=1e-6, bandwidth=1e9)


def _raises(call, exc, pattern):
    """``call()`` raises exactly ``exc`` (not the other argument error) matching ``pattern``."""
    other = T if exc is E else E
    with pytest.raises(exc, match=pattern) as info:
        call()
    assert not isinstance(info.value, other), info.value
    return info.value


# -- the shared integer rule -------------------------------------------------------------------

@pytest.mark.parametrize("value", [3, np.int64(3), np.int8(3), np.uint16(3)])
def test_python_and_numpy_integers_are_accepted_as_int(value):
    assert type(check_int(value, "count")) is int and check_int(value, "count") == 3
    assert type(check_rank(value, 4, "src")) is int


@pytest.mark.parametrize("value", [True, np.bool_(True), 3.0, 2.5, "3", None, [3]])
def test_bool_float_and_others_are_not_integers(value):
    _raises(lambda: check_int(value, "count"), T, rf"^count={re.escape(repr(value))} must be an "
                                                  "integer >= 0, got")


@pytest.mark.parametrize("name", ["nope", "C", None, ["a"], 3])
def test_lookup_refuses_what_is_no_key_naming_it_and_the_keys(name):
    _raises(lambda: lookup({"a": 1, "b": 2}, name, "model", "a preset", " or a path",
                           lower=True),
            ArgumentError, rf"^model={re.escape(repr(name))} is not a preset; expected one of "
            r"a, b or a path$")


def test_lookup_folds_case_only_when_asked():
    assert lookup({"a": 1}, "A", "model", "a preset", lower=True) == 1
    with pytest.raises(ArgumentError, match=r"^precision='A' is not a recipe"):
        lookup({"a": 1}, "A", "precision", "a recipe")


def test_numpy_integers_work_end_to_end():
    s = ringccl.schedule("broadcast", "ring", np.int64(4), root=np.int32(2), segments=np.int16(2))
    assert (s.world_size, s.params["root"]) == (4, 2) and type(s.params["root"]) is int
    r = ringccl.simulate("broadcast", X, src=np.int64(3))
    assert np.array_equal(r.outputs, np.tile(X[3], (4, 1)))
    assert ringccl.cost("all_reduce", "ring", np.int64(4), np.int64(1024), **FLAT).seconds > 0
    assert s.bytes_sent(np.int64(8), np.int64(4)).sum() > 0


# -- simulator, schedules, cost model ----------------------------------------------------------

SIM_CASES = [
    # unknown collective / algorithm / op: the message lists the valid names
    ("schedule collective", lambda: ringccl.schedule("allreduce", "ring", 4), E,
     r"collective='allreduce' is unknown; expected one of all_reduce, reduce_scatter"),
    ("schedule algorithm", lambda: ringccl.schedule("all_reduce", "rign", 4), E,
     r"algorithm='rign' is not available for all_reduce; expected one of ring, direct"),
    ("simulate collective", lambda: ringccl.simulate("allreduce", X), E,
     r"collective='allreduce' is unknown; expected one of all_reduce"),
    ("simulate algorithm", lambda: ringccl.simulate("scatter", X, algorithm="ring"), E,
     r"algorithm='ring' is not available for scatter; expected one of direct, binomial"),
    ("simulate op", lambda: ringccl.simulate("all_reduce", X, op="add"), E,
     r"op='add' is not a reduce op; expected one of sum, prod, min, max, avg, band, bor, bxor"),
    ("simulate op None", lambda: ringccl.simulate("reduce", X, op=None), E,
     r"op=None is not a reduce op; expected one of sum"),
    ("cost collective", lambda: ringccl.cost("bcast", "ring", 4, 64, **FLAT), E,
     r"collective='bcast' is unknown; expected one of"),
    ("cost algorithm", lambda: ringccl.cost("all_reduce", "nope", 4, 64, **FLAT), E,
     r"algorithm='nope' is not available for all_reduce; expected one of ring"),
    ("tune collective", lambda: ringccl.tune("allgather", 4, **FLAT), E,
     r"collective='allgather' is unknown; expected one of"),
    ("algorithms collective", lambda: ringccl.algorithms("bcast"), E,
     r"collective='bcast' is unknown; expected one of"),
    # world_size < 1 or not an integer
    ("schedule world_size 0", lambda: ringccl.schedule("all_reduce", "ring", 0), E,
     r"world_size=0 must be an integer >= 1"),
    ("schedule world_size -3", lambda: ringccl.schedule("all_gather", "bruck", -3), E,
     r"world_size=-3 must be an integer >= 1"),
    ("schedule world_size float", lambda: ringccl.schedule("all_reduce", "ring", 4.0), T,
     r"world_size=4\.0 must be an integer >= 1, got float"),
    ("schedule world_size bool", lambda: ringccl.schedule("all_reduce", "ring", True), T,
     r"world_size=True must be an integer >= 1, got bool"),
    ("cost world_size 0", lambda: ringccl.cost("all_reduce", "ring", 0, 64, **FLAT), E,
     r"world_size=0 must be an integer >= 1"),
    ("cost world_size float", lambda: ringccl.cost("all_reduce", "ring", 4.5, 64, **FLAT), T,
     r"world_size=4\.5 must be an integer"),
    ("tune world_size 0", lambda: ringccl.tune("all_reduce", 0, **FLAT), E,
     r"world_size=0 must be an integer >= 1"),
    ("simulate no ranks", lambda: ringccl.simulate("all_reduce", np.zeros((0, 3), np.float32)),
     E, r"inputs has world_size=0 rows; need at least 1"),
    # counts: negative, float, bool
    ("bytes_sent negative", lambda: ringccl.schedule("all_reduce").bytes_sent(-1, 4), E,
     r"buffer_count=-1 must be an integer >= 0"),
    ("bytes_sent float", lambda: ringccl.schedule("all_reduce").bytes_sent(2.5, 4), T,
     r"buffer_count=2\.5 must be an integer >= 0, got float"),
    ("bytes_sent bool", lambda: ringccl.schedule("all_reduce").bytes_received(True, 4), T,
     r"buffer_count=True must be an integer >= 0, got bool"),
    ("bytes_sent itemsize", lambda: ringccl.schedule("all_reduce").bytes_sent(8, 0), E,
     r"itemsize=0 must be an integer >= 1"),
    ("chunk_bounds negative", lambda: ringccl.chunk_bounds(-1, 4), E,
     r"count=-1 must be an integer >= 0"),
    ("chunk_bounds float", lambda: ringccl.chunk_bounds(7.5, 4), T,
     r"count=7\.5 must be an integer >= 0, got float"),
    ("chunk_bounds num_chunks", lambda: ringccl.chunk_bounds(8, 0), E,
     r"num_chunks=0 must be an integer >= 1"),
    ("cost nbytes negative", lambda: ringccl.cost("all_reduce", "ring", 4, -1, **FLAT), E,
     r"nbytes=-1 must be a finite number of bytes >= 0"),
    ("cost nbytes bool", lambda: ringccl.cost("all_reduce", "ring", 4, True, **FLAT), T,
     r"nbytes=True must be a number of bytes"),
    ("segments 0", lambda: ringccl.schedule("broadcast", "ring", 4, segments=0), E,
     r"segments=0 must be an integer >= 1"),
    ("segments float", lambda: ringccl.schedule("reduce", "tree", 4, segments=1.5), T,
     r"segments=1\.5 must be an integer >= 1, got float"),
    # root (src/dst) out of range or not an integer
    ("schedule root range", lambda: ringccl.schedule("broadcast", "ring", 4, root=4), E,
     r"root=4 is out of range for world_size=4; root must be an integer rank in \[0, 4\)"),
    ("schedule root float", lambda: ringccl.schedule("gather", "binomial", 4, root=1.0), T,
     r"root=1\.0 must be an integer rank in \[0, 4\), got float"),
    ("simulate src range", lambda: ringccl.simulate("broadcast", X, src=4), E,
     r"src=4 is out of range for world_size=4"),
    ("simulate src negative", lambda: ringccl.simulate("scatter", X, src=-1), E,
     r"src=-1 is out of range for world_size=4"),
    ("simulate dst range", lambda: ringccl.simulate("gather", X, dst=9), E,
     r"dst=9 is out of range for world_size=4"),
    ("simulate dst bool", lambda: ringccl.simulate("reduce", X, dst=True), T,
     r"dst=True must be an integer rank in \[0, 4\), got bool"),
    ("simulate src float", lambda: ringccl.simulate("broadcast", X, src=1.0), T,
     r"src=1\.0 must be an integer rank"),
    ("simulate src on reduce", lambda: ringccl.simulate("reduce", X, src=1), E,
     r"src=1 does not apply to reduce, which takes dst="),
    ("cost root range", lambda: ringccl.cost("broadcast", "ring", 4, 64, root=5, **FLAT), E,
     r"root=5 is out of range for world_size=4"),
    ("program rank", lambda: ringccl.schedule("all_reduce").program(4), E,
     r"rank=4 is out of range for world_size=4"),
    # all_to_all split sizes: wrong sum, wrong length, negative, not integers, not transposes
    ("split sum", lambda: ringccl.simulate("all_to_all", X, algorithm="direct",
                                           input_split_sizes=np.ones((4, 4), int)), E,
     r"input_split_sizes\[0\] sums to 4, but rank 0's input has 8 elements"),
    ("split length", lambda: ringccl.simulate("all_to_all", X, algorithm="direct",
                                              output_split_sizes=np.full((4, 3), 2)), E,
     r"output_split_sizes must be an integer array of shape \(world_size, world_size\) = "
     r"\(4, 4\), one row per rank; got shape \(4, 3\)"),
    ("split negative", lambda: ringccl.simulate(
        "all_to_all", X, algorithm="direct", input_split_sizes=[[3, -1, 3, 3]] * 4), E,
     r"input_split_sizes\[0\]\[1\]=-1 must be >= 0"),
    ("split float", lambda: ringccl.simulate("all_to_all", X, algorithm="direct",
                                             input_split_sizes=np.full((4, 4), 2.0)), E,
     r"input_split_sizes must be an integer array .* dtype float64"),
    ("split transpose", lambda: ringccl.simulate(
        "all_to_all", X, algorithm="direct", input_split_sizes=np.full((4, 4), 2),
        output_split_sizes=[[3, 1, 2, 2]] + [[2] * 4] * 3), E,
     r"output_split_sizes\[0\]\[0\]=3 but rank 0 sends input_split_sizes\[0\]\[0\]=2"),
    ("split not all_to_all", lambda: ringccl.simulate("all_gather", X,
                                                      input_split_sizes=np.ones((4, 4), int)),
     E, r"input_split_sizes/output_split_sizes apply to all_to_all only, not all_gather"),
    # preallocated output of the wrong shape / dtype / layout
    ("out shape", lambda: ringccl.simulate("all_reduce", X, out=np.empty((4, 7), np.float32)),
     E, r"out must be a C-contiguous float32 array of shape \(4, 8\), got shape \(4, 7\)"),
    ("out dtype", lambda: ringccl.simulate("all_reduce", X, out=np.empty((4, 8))), E,
     r"out must be a C-contiguous float32 array .*dtype float64"),
    ("out layout", lambda: ringccl.simulate("all_reduce", X,
                                            out=np.empty((4, 16), np.float32)[:, ::2]), E,
     r"out must be a C-contiguous float32 array .*, not C-contiguous"),
    # op × dtype, unsupported and mixed dtypes
    ("avg on integers", lambda: ringccl.simulate("all_reduce", XI, op="avg"), E,
     r"op=avg needs a floating dtype, got int32"),
    ("avg on bool", lambda: ringccl.simulate("reduce_scatter", XI > 3, op="avg"), E,
     r"op=avg needs a floating dtype, got bool"),
    ("band on floats", lambda: ringccl.simulate("all_reduce", X, op="band"), E,
     r"op=band is bitwise and needs an integer or bool dtype, got float32"),
    ("bxor on floats", lambda: ringccl.simulate("reduce", X.astype(np.float16), op="bxor"), E,
     r"op=bxor is bitwise and needs an integer or bool dtype, got float16"),
    ("complex", lambda: ringccl.simulate("all_gather", X.astype(np.complex64)), T,
     r"inputs\.dtype=complex64 is not supported; expected one of float16, float32"),
    ("object", lambda: ringccl.simulate("all_reduce", np.array([[1, "a"]], dtype=object)), T,
     r"inputs\.dtype=object is not supported"),
    ("mixed rows", lambda: ringccl.simulate(
        "all_to_all", [np.ones(4, np.float32), np.ones(4, np.int32)], algorithm="direct",
        input_split_sizes=np.full((2, 2), 2)), T,
     r"inputs rows have different dtypes: float32, int32"),
    ("inputs shape", lambda: ringccl.simulate("all_reduce", np.zeros(3, np.float32)), E,
     r"inputs must have shape \(world_size, count\), got shape \(3,\)"),
    # ragged inputs: numpy cannot stack them; the message names the first row that differs
    ("ragged rows", lambda: ringccl.simulate(
        "all_reduce", [np.ones(3, np.float32), np.ones(3, np.float32), np.ones(4, np.float32)]),
     E, r"inputs must have shape \(world_size, count\), one row of the same length per rank; "
        r"inputs\[0\] has shape \(3,\) but inputs\[2\] has shape \(4,\) \(rows of different "
        r"lengths need all_to_all with input_split_sizes/output_split_sizes\)"),
    ("ragged ndim", lambda: ringccl.simulate("reduce_scatter", [np.ones((2, 2)), np.ones(4)]),
     E, r"inputs\[0\] has shape \(2, 2\) but inputs\[1\] has shape \(4,\)"),
    ("ragged lists", lambda: ringccl.simulate("all_gather", [[1, 2], [3]]), E,
     r"inputs\[0\] has shape \(2,\) but inputs\[1\] has shape \(1,\)"),
    ("ragged row", lambda: ringccl.simulate("all_to_all", ([1, 2], [3, [4]])), E,
     r"inputs\[0\] has shape \(2,\) but inputs\[1\] is itself ragged"),
    ("ragged split row", lambda: ringccl.simulate(
        "all_to_all", [np.ones(4), np.ones((2, 2))], algorithm="direct",
        input_split_sizes=np.full((2, 2), 2)), E,
     r"inputs\[1\] has shape \(2, 2\); with split sizes inputs must be a sequence of 1-D "
     r"arrays, one per rank"),
    ("schedule for another call", lambda: ringccl.simulate(
        "all_reduce", X, schedule=ringccl.schedule("all_reduce", "ring", 3)), E,
     r"schedule is for all_reduce on world_size=3, but the call is all_reduce on 4 ranks"),
    ("schedule type", lambda: ringccl.simulate("all_reduce", X, schedule="ring"), T,
     r"schedule must be a ringccl Schedule, got str"),
    ("verify type", lambda: ringccl.verify("ring"), T,
     r"schedule='ring' must be a ringccl Schedule, got str"),
    ("step lengths", lambda: ringccl.Step(np.array([0, 1]), np.array([1]), np.array([0]),
                                          np.array([0]), np.array([False])), E,
     r"Step arrays must have one entry per transfer each, got lengths \{'src': 2, 'dst': 1"),
    ("step ragged", lambda: ringccl.Step([[0, 1], [1]], [1], [0], [0], [True]), E,
     r"Step src=\[\[0, 1\], \[1\]\] must be a 1-D array of integers"),
    ("step floats", lambda: ringccl.Step([0.5], [1], [0], [0], [True]), T,
     r"Step src=\[0.5\] must hold integers, got float64"),
    ("cost huge int", lambda: ringccl.cost("all_reduce", "ring", 8, 10**400, **FLAT), E,
     r"nbytes=1000.* must be a finite number of bytes >= 0"),
    ("busbw world_size", lambda: ringccl.busbw("all_reduce", 1024, 1e-3, 0), E,
     r"world_size=0 must be an integer >= 1"),
    ("busbw seconds", lambda: ringccl.busbw("all_reduce", 1024, 0, 8), E,
     r"seconds=0 must be a finite number > 0"),
    ("algbw nbytes", lambda: ringccl.algbw("1KiB", 1), T, r"nbytes='1KiB' must be a number"),
]


@pytest.mark.parametrize("call,exc,pattern", [c[1:] for c in SIM_CASES],
                         ids=[c[0] for c in SIM_CASES])
def test_simulator_schedule_and_cost_refuse_bad_arguments(call, exc, pattern):
    _raises(call, exc, pattern)


def test_schedule_beyond_memory_is_refused_before_it_is_built(monkeypatch):
    """``ringccl.schedule`` sizes a schedule before building it, as the command line does:
    30,000 ranks of direct all_reduce (~9·10⁸ transfers) is refused naming world_size, with
    the machine's memory held at 8 GiB; the process's address-space limit is left alone."""
    import resource

    from ringccl import resources
    monkeypatch.setattr(resources, "available_memory", lambda: 8 << 30)
    limit = resource.getrlimit(resource.RLIMIT_AS)
    with pytest.raises(ArgumentError, match=r"world_size=30000: the direct all_reduce schedule "
                       r"on 30000 ranks would have about [\d,]+ transfers .* more than this "
                       r"machine's 8\.00 GiB available; use a smaller world_size"):
        ringccl.schedule("all_reduce", "direct", world_size=30000)
    assert resource.getrlimit(resource.RLIMIT_AS) == limit
    assert ringccl.schedule("all_reduce", "direct", world_size=100).num_transfers == 100 * 99
    # checked once: a schedule built before is returned as it is, until clear_caches
    first = ringccl.schedule("all_reduce", "ring", world_size=128)
    assert ringccl.schedule("all_reduce", "ring", world_size=128) is first
    ringccl.clear_caches()
    assert ringccl.schedule("all_reduce", "ring", world_size=128) is not first


def test_simulate_refusals_leave_inputs_and_out_bit_identical():
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    x_before = x.copy()
    out = np.full((4, 8), 7.0, np.float32)
    for call in (lambda: ringccl.simulate("all_reduce", x, op="band", out=out),
                 lambda: ringccl.simulate("all_reduce", x, algorithm="nope", out=out),
                 lambda: ringccl.simulate("broadcast", x, src=4, out=out),
                 lambda: ringccl.simulate("all_reduce", x, segments=0, out=out)):
        with pytest.raises((E, T)):
            call()
        assert x.tobytes() == x_before.tobytes()
        assert (out == 7.0).all()


# -- ringccl.torch on a 1-rank gloo group in this process ----------------------------------------

torch_missing = importlib.util.find_spec("torch") is None


@pytest.fixture(scope="module")
def group():
    yield from one_rank_gloo_group()


def _torch_cases():
    """(id, call(torch, rt), exception, pattern); built lazily so the module imports without
    torch."""
    f, i = "torch.float32", "torch.int32"
    return [
        # unknown algorithm / op
        ("all_reduce algorithm", lambda t, rt: rt.all_reduce(t.ones(4), algorithm="rign"), E,
         r"algorithm='rign' is not available for all_reduce; expected one of ring"),
        ("all_gather algorithm", lambda t, rt: rt.all_gather_into_tensor(
            t.zeros(4), t.ones(4), algorithm="pairwise"), E,
         r"algorithm='pairwise' is not available for all_gather; expected one of ring"),
        ("all_to_all_single algorithm", lambda t, rt: rt.all_to_all_single(
            t.zeros(4), t.ones(4), algorithm="ring"), E,
         r"algorithm='ring' is not available for all_to_all; expected one of"),
        ("scatter algorithm", lambda t, rt: rt.scatter(t.zeros(2), [t.ones(2)], src=0,
                                                       algorithm="ring"), E,
         r"algorithm='ring' is not available for scatter; expected one of direct, binomial"),
        ("all_reduce op", lambda t, rt: rt.all_reduce(t.ones(4), op="add"), E,
         r"op='add' is not a reduce op; expected one of sum, prod"),
        ("reduce op", lambda t, rt: rt.reduce(t.ones(4), dst=0, op=None), E,
         r"op=None is not a reduce op; expected one of sum"),
        ("reduce_scatter op", lambda t, rt: rt.reduce_scatter_tensor(
            t.zeros(4), t.ones(4), op="mean_of_squares"), E,
         r"op='mean_of_squares' is not a reduce op"),
        # root out of range / not an integer
        ("broadcast src range", lambda t, rt: rt.broadcast(t.ones(4), src=1), E,
         r"src=1 is out of range for world_size=1"),
        ("broadcast src float", lambda t, rt: rt.broadcast(t.ones(4), src=0.0), T,
         r"src=0\.0 must be an integer rank in \[0, 1\), got float"),
        ("scatter src bool", lambda t, rt: rt.scatter(t.ones(4), None, src=True), T,
         r"src=True must be an integer rank in \[0, 1\), got bool"),
        ("scatter src negative", lambda t, rt: rt.scatter(t.ones(2), [t.ones(2)], src=-1), E,
         r"src=-1 is out of range for world_size=1"),
        ("reduce dst range", lambda t, rt: rt.reduce(t.ones(4), dst=2), E,
         r"dst=2 is out of range for world_size=1"),
        ("gather dst str", lambda t, rt: rt.gather(t.ones(2), [t.ones(2)], dst="0"), T,
         r"dst='0' must be an integer rank, got str|dst='0' must be an integer rank in"),
        ("all_gather overlap", lambda t, rt: (lambda o: rt.all_gather_into_tensor(o[0:4], o[1:5]))(
            t.arange(5.0)), E, r"input_tensor shares memory with output_tensor but is not "
         r"output_tensor's block rank 0 \(elements 0:4"),
        ("group str", lambda t, rt: rt.all_reduce(t.ones(4), group="x"), T,
         r"group='x' must be a torch.distributed ProcessGroup"),
        ("timeout inf", lambda t, rt: rt.all_reduce(t.ones(4), timeout=float("inf")), E,
         r"timeout=inf must be a finite number of seconds > 0"),
        ("restore str", lambda t, rt: rt.all_reduce(t.ones(4), restore="no"), T,
         r"restore='no' must be True or False"),
        ("check str", lambda t, rt: rt.all_reduce(t.ones(4), check="yes"), T,
         r"check='yes' must be True, False or None"),
        ("accumulate on broadcast", lambda t, rt: rt.broadcast(t.ones(4), src=0,
                                                               accumulate_dtype="float64"), E,
         r"accumulate_dtype='float64' applies to reducing collectives only .* not broadcast"),
        ("broadcast root=", lambda t, rt: rt.broadcast(t.ones(4), src=0, root=0), E,
         r"give the root as src/dst, not as root=0"),
        # split sizes
        ("split sum", lambda t, rt: rt.all_to_all_single(t.zeros(4), t.ones(4), [4], [2]), E,
         r"input_split_sizes sums to 2, but input has 4 rows \(dim 0\): "
         r"input_split_sizes=\[2\] must sum to input\.shape\[0\]"),
        ("split length", lambda t, rt: rt.all_to_all_single(t.zeros(4), t.ones(4), [2, 2]), E,
         r"output_split_sizes=\[2, 2\] has 2 entries; it must have world_size=1"),
        ("split negative", lambda t, rt: rt.all_to_all_single(t.zeros(4), t.ones(4), [4], [-4]),
         E, r"input_split_sizes\[0\]=-4 must be an integer >= 0"),
        ("split float", lambda t, rt: rt.all_to_all_single(t.zeros(4), t.ones(4), [4.0]), T,
         r"output_split_sizes\[0\]=4\.0 must be an integer >= 0, got float"),
        ("split not a list", lambda t, rt: rt.all_to_all_single(t.zeros(4), t.ones(4), 4), T,
         r"output_split_sizes=4 must be a list of world_size=1 integers >= 0, got int"),
        # outputs of the wrong shape / dtype / device, lists of the wrong length
        ("reduce_scatter output size", lambda t, rt: rt.reduce_scatter_tensor(
            t.zeros(3), t.ones(4)), E,
         r"input has 4 elements; reduce_scatter_tensor needs world_size \* output\.numel\(\) = "
         r"1 \* 3"),
        ("all_gather output size", lambda t, rt: rt.all_gather_into_tensor(
            t.zeros(5), t.ones(4)), E,
         r"output_tensor has 5 elements; all_gather_into_tensor needs world_size \* "
         r"input_tensor\.numel\(\) = 1 \* 4"),
        ("all_to_all_single output rows", lambda t, rt: rt.all_to_all_single(
            t.zeros(5), t.ones(4)), E,
         r"output_split_sizes\[0\]=5 rows, but this rank \(rank 0\) sends itself "
         r"input_split_sizes\[0\]=4 rows"),
        ("all_to_all_single trailing dims", lambda t, rt: rt.all_to_all_single(
            t.zeros(2, 3), t.ones(2, 2)), E,
         r"output\.shape=\(2, 3\) and input\.shape=\(2, 2\) differ beyond dim 0"),
        ("all_to_all output size", lambda t, rt: rt.all_to_all([t.zeros(3)], [t.ones(4)]), E,
         r"output_tensor_list\[0\]\.numel\(\)=3 elements, but this rank \(rank 0\) sends itself "
         r"input_tensor_list\[0\]\.numel\(\)=4"),
        ("all_to_all list length", lambda t, rt: rt.all_to_all([t.zeros(1)] * 2, [t.ones(1)]),
         E, r"output_tensor_list must be a list of world_size=1 tensors, got list of length 2"),
        ("all_to_all list type", lambda t, rt: rt.all_to_all(t.zeros(1), [t.ones(1)]), T,
         r"output_tensor_list must be a list of world_size=1 tensors, got Tensor"),
        ("scatter_list numel", lambda t, rt: rt.scatter(t.zeros(2), [t.ones(3)], src=0), E,
         r"scatter_list\[0\] has 3 elements; every tensor must have tensor\.numel\(\)=2"),
        ("scatter_list missing", lambda t, rt: rt.scatter(t.zeros(2), None, src=0), E,
         r"scatter_list must be a list of world_size=1 tensors, got NoneType"),
        ("gather_list length", lambda t, rt: rt.gather(t.ones(2), [t.zeros(2)] * 3, dst=0), E,
         r"gather_list must be a list of world_size=1 tensors, got list of length 3"),
        ("gather_list dtype", lambda t, rt: rt.gather(
            t.ones(2), [t.zeros(2, dtype=t.float64)], dst=0), T,
         rf"gather_list\[0\]\.dtype=torch\.float64 differs from tensor\.dtype={f}"),
        ("gather_list entry", lambda t, rt: rt.gather(t.ones(2), [[0.0, 0.0]], dst=0), T,
         r"gather_list\[0\] must be a torch\.Tensor, got list"),
        ("device", lambda t, rt: rt.reduce_scatter_tensor(
            t.empty(4, device="meta"), t.ones(4)), E,
         r"output\.device=meta differs from input\.device=cpu"),
        ("expanded output", lambda t, rt: rt.all_gather_into_tensor(
            t.zeros(1).expand(4), t.ones(4)), E,
         r"output_tensor \(shape \(4,\), stride \(0,\)\) has elements that share memory"),
        ("expanded in-place", lambda t, rt: rt.all_reduce(t.zeros(1, 1).expand(3, 2)), E,
         r"tensor \(shape \(3, 2\), stride \(0, 0\)\) has elements that share memory"),
        ("sparse", lambda t, rt: rt.all_reduce(t.ones(4).to_sparse()), T,
         r"tensor is a torch\.sparse_coo tensor; ringccl\.torch moves dense \(torch\.strided\)"),
        ("sparse input", lambda t, rt: rt.all_gather_into_tensor(
            t.zeros(4), t.ones(4).to_sparse()), T, r"input_tensor is a torch\.sparse_coo tensor"),
        # mixed, unsupported and op-incompatible dtypes
        ("mixed reduce_scatter", lambda t, rt: rt.reduce_scatter_tensor(
            t.zeros(4, dtype=t.float64), t.ones(4)), T,
         rf"output\.dtype=torch\.float64 differs from input\.dtype={f}"),
        ("mixed all_gather", lambda t, rt: rt.all_gather_into_tensor(
            t.zeros(4, dtype=t.int32), t.ones(4)), T,
         rf"output_tensor\.dtype={i} differs from input_tensor\.dtype={f}"),
        ("mixed all_to_all_single", lambda t, rt: rt.all_to_all_single(
            t.zeros(4, dtype=t.int64), t.ones(4)), T,
         rf"output\.dtype=torch\.int64 differs from input\.dtype={f}"),
        ("mixed all_to_all", lambda t, rt: rt.all_to_all(
            [t.zeros(1, dtype=t.float16)], [t.ones(1)]), T,
         rf"output_tensor_list\[0\]\.dtype=torch\.float16 differs from "
         rf"input_tensor_list\[0\]\.dtype={f}"),
        ("complex", lambda t, rt: rt.all_reduce(t.ones(4, dtype=t.complex64)), T,
         r"tensor\.dtype=torch\.complex64 is not supported; expected one of float16, bfloat16"),
        ("complex input", lambda t, rt: rt.all_gather_into_tensor(
            t.zeros(4), t.ones(4, dtype=t.complex128)), T,
         r"input_tensor\.dtype=torch\.complex128 is not supported"),
        ("not a tensor", lambda t, rt: rt.broadcast([1.0, 2.0], src=0), T,
         r"tensor must be a torch\.Tensor, got list"),
        ("avg on integers", lambda t, rt: rt.all_reduce(t.ones(4, dtype=t.int32), op="avg"), E,
         r"op=avg needs a floating dtype, got int32"),
        ("avg on bool", lambda t, rt: rt.reduce(t.ones(4, dtype=t.bool), dst=0, op="avg"), E,
         r"op=avg needs a floating dtype, got bool"),
        ("band on floats", lambda t, rt: rt.reduce_scatter_tensor(
            t.zeros(4), t.ones(4), op="band"), E,
         r"op=band is bitwise and needs an integer or bool dtype, got float32"),
        ("bor on bfloat16", lambda t, rt: rt.all_reduce(t.ones(4, dtype=t.bfloat16), op="bor"),
         E, r"op=bor is bitwise and needs an integer or bool dtype, got bfloat16"),
        # executor parameters
        ("segment_bytes negative", lambda t, rt: rt.all_reduce(t.ones(4), segment_bytes=-1), E,
         r"segment_bytes=-1 must be an integer >= 0"),
        ("segment_bytes float", lambda t, rt: rt.broadcast(t.ones(4), 0, segment_bytes=1.5), T,
         r"segment_bytes=1\.5 must be an integer >= 0, got float"),
        ("segments 0", lambda t, rt: rt.broadcast(t.ones(4), 0, segments=0), E,
         r"segments=0 must be an integer >= 1"),
        ("run_schedule buffer", lambda t, rt: rt.run_schedule(
            ringccl.schedule("all_reduce", "ring", 1), t.zeros(8)[::2]), E,
         r"buffer must be 1-D and contiguous, got shape \(4,\), stride \(2,\)"),
    ]


def _torch_params():
    # the lambdas only touch torch when called, so they can be listed without torch
    return [pytest.param(c[1], c[2], c[3], id=c[0]) for c in _torch_cases()]


@pytest.mark.parametrize("call,exc,pattern", _torch_params())
def test_torch_refuses_bad_arguments(group, call, exc, pattern):
    import torch

    import ringccl.torch as rt
    _raises(lambda: call(torch, rt), exc, pattern)


def _snapshot(tensors):
    return [t.detach().clone() for t in tensors]


def _bits(t):
    return t.contiguous().view(-1).view(__import__("torch").uint8).tolist()


def test_torch_refusals_leave_caller_tensors_bit_identical(group):
    """Every refused call, including ones refused after part of the checks passed (an unknown
    algorithm, the own-block check, a bad list entry), writes into no caller tensor."""
    import torch

    import ringccl.torch as rt
    g = torch.Generator().manual_seed(0)

    def r(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    out, inp = r(8), r(8)
    lst_out, lst_in = [r(5)], [r(4)]
    t = r(6, 4).t()  # non-contiguous, written through a copy
    gl = [r(3)]
    calls = [
        (lambda: rt.all_gather_into_tensor(out, inp, algorithm="nope"), [out, inp]),
        (lambda: rt.all_gather_into_tensor(out, inp, segment_bytes=-1), [out, inp]),
        (lambda: rt.reduce_scatter_tensor(out, inp, op="band"), [out, inp]),
        (lambda: rt.reduce_scatter_tensor(out, inp, algorithm="direct", segments=3), [out, inp]),
        (lambda: rt.all_to_all_single(out, inp, [8], [7]), [out, inp]),
        (lambda: rt.all_to_all_single(out, inp, algorithm="bruck", nonsense=1), [out, inp]),
        (lambda: rt.all_to_all(lst_out, lst_in), lst_out + lst_in),
        (lambda: rt.all_reduce(t, algorithm="rign"), [t]),
        (lambda: rt.all_reduce(t, op="bxor"), [t]),
        (lambda: rt.broadcast(t, src=1), [t]),
        (lambda: rt.reduce(t, dst=0, algorithm="tree", segments=0), [t]),
        (lambda: rt.scatter(gl[0], [r(3, dtype=torch.float64)], src=0), gl),
        (lambda: rt.gather(inp, [out.clone()[:4]], dst=0), [inp]),
    ]
    for call, tensors in calls:
        before = [_bits(x) for x in tensors]
        with pytest.raises((E, T)):
            call()
        assert [_bits(x) for x in tensors] == before, call


def test_torch_non_contiguous_tensors_are_handled(group):
    """Every function that takes tensors accepts non-contiguous inputs and outputs (a transposed
    view and a strided slice of a larger buffer): the result lands in the view, and the memory
    around a strided view is untouched."""
    import torch

    import ringccl.torch as rt

    def strided(n, fill=-1.0):  # every other element of a 2n buffer, and the buffer
        base = torch.full((2 * n,), fill)
        return base[::2], base

    def check_around(base):  # odd positions are outside the view
        assert (base[1::2] == -1.0).all()

    src = torch.arange(12, dtype=torch.float32)
    # in place: all_reduce, broadcast, reduce
    for fn in (lambda x: rt.all_reduce(x), lambda x: rt.broadcast(x, src=0),
               lambda x: rt.reduce(x, dst=0), lambda x: rt.all_reduce(x, op="avg")):
        x = src.reshape(3, 4).clone().t()  # (4, 3), not contiguous
        assert not x.is_contiguous()
        fn(x)
        assert torch.equal(x, src.reshape(3, 4).t())
        v, base = strided(12)
        v.copy_(src)
        fn(v)
        assert torch.equal(v, src)
        check_around(base)
    # outputs that are views: a transposed (dense) one and a strided one
    def transposed(n):
        base = torch.full((3, n // 3), -1.0)
        return base.t(), None

    for make_out in (transposed, strided):
        out, base = make_out(12)
        rt.all_gather_into_tensor(out, src.reshape(4, 3).t())  # input not contiguous either
        assert torch.equal(out.reshape(-1), src.reshape(4, 3).t().reshape(-1))
        out, base = make_out(12)
        rt.reduce_scatter_tensor(out, src.reshape(6, 2).t())
        assert torch.equal(out.reshape(-1), src.reshape(6, 2).t().reshape(-1))
        out, base = make_out(12)
        rt.all_to_all_single(out, src.reshape(3, 4).t().reshape(out.shape))
        assert torch.equal(out.reshape(-1), src.reshape(3, 4).t().reshape(-1))
        if base is not None:
            check_around(base)
    # lists of views: scatter, gather, all_to_all
    tensor, base = strided(6)
    rt.scatter(tensor, [src[::2]], src=0)
    assert torch.equal(tensor, src[::2])
    check_around(base)
    g_out, g_base = strided(6)
    rt.gather(src[1::2], [g_out], dst=0)
    assert torch.equal(g_out, src[1::2])
    check_around(g_base)
    a_out, a_base = strided(6)
    rt.all_to_all([a_out], [src.reshape(6, 2).t()[1]])
    assert torch.equal(a_out, src.reshape(6, 2).t()[1])
    check_around(a_base)


# -- ringccl.mpi on COMM_WORLD of size 1 in this process -----------------------------------------

mpi_missing = importlib.util.find_spec("mpi4py") is None
needs_mpi = pytest.mark.skipif(mpi_missing, reason="mpi4py is not installed "
                               "(pip install 'ringccl[mpi]'): ringccl.mpi checks not run")

A = np.arange(8, dtype=np.float32)


def _mpi_cases():
    import ringccl.mpi as rm
    ro = np.zeros(8, np.float32)
    ro.flags.writeable = False
    buf = np.arange(9, dtype=np.float32)
    return [
        ("algorithm", lambda: rm.all_reduce(A.copy(), algorithm="rign"), E,
         r"algorithm='rign' is not available for all_reduce; expected one of ring"),
        ("op", lambda: rm.all_reduce(A.copy(), op="add"), E,
         r"op='add' is not a reduce op; expected one of sum"),
        ("avg on integers", lambda: rm.all_reduce(np.ones(4, np.int64), op="avg"), E,
         r"op=avg needs a floating dtype, got int64"),
        ("band on floats", lambda: rm.reduce_scatter(np.zeros(8, np.float32), A, op="band"), E,
         r"op=band is bitwise and needs an integer or bool dtype, got float32"),
        ("complex", lambda: rm.all_reduce(np.ones(4, np.complex64)), T,
         r"buffer\.dtype=complex64 is not supported; expected one of float16"),
        ("not an array", lambda: rm.all_reduce([1.0, 2.0]), T,
         r"buffer must be a numpy\.ndarray, got list"),
        ("mixed dtypes", lambda: rm.all_gather(np.zeros(8, np.float64), A), T,
         r"output\.dtype=float64 differs from input\.dtype=float32"),
        ("reduce_scatter output size", lambda: rm.reduce_scatter(np.zeros(3, np.float32), A), E,
         r"input has 8 elements; reduce_scatter needs world_size \* output\.size = 1 \* 3"),
        ("all_gather output size", lambda: rm.all_gather(np.zeros(9, np.float32), A), E,
         r"output has 9 elements; all_gather needs world_size \* input\.size = 1 \* 8"),
        ("non-contiguous", lambda: rm.all_reduce(np.zeros(16, np.float32)[::2]), E,
         r"buffer \(shape \(8,\), strides \(8,\)\) must be C-contiguous"),
        ("read-only", lambda: rm.all_gather(ro, A), E,
         r"output \(shape \(8,\)\) is read-only"),
        ("segment_bytes", lambda: rm.all_reduce(A.copy(), segment_bytes=-1), E,
         r"segment_bytes=-1 must be an integer >= 0"),
        ("segment_bytes float", lambda: rm.all_gather(A.copy(), A.copy(), segment_bytes=0.5), T,
         r"segment_bytes=0\.5 must be an integer >= 0, got float"),
        ("timeout", lambda: rm.all_reduce(A.copy(), timeout=-5), E,
         r"timeout=-5 must be a finite number of seconds > 0"),
        ("reduce_scatter partial overlap", lambda: rm.reduce_scatter(buf[1:9], buf[0:8]), E,
         r"output overlaps input but is not exactly input's block rank \(elements 0:8"),
        ("all_gather partial overlap", lambda: rm.all_gather(buf[0:8], buf[1:9]), E,
         r"input overlaps output but is not exactly output's block rank \(elements 0:8\)"),
        ("segments=2.0 after segments=2 was cached",
         lambda: (rm.broadcast(A.copy(), algorithm="tree", segments=2),
                  rm.broadcast(A.copy(), algorithm="tree", segments=2.0)), T,
         r"segments=2\.0 must be an integer >= 1, got float"),
    ]


@needs_mpi
@pytest.mark.parametrize("index", range(17))
def test_mpi_refuses_bad_arguments(index):
    cases = _mpi_cases()
    assert len(cases) == 17
    _, call, exc, pattern = cases[index]
    _raises(call, exc, pattern)


@needs_mpi
def test_mpi_refusals_leave_caller_arrays_bit_identical():
    import ringccl.mpi as rm
    out, inp = np.full(8, 3.5, np.float32), A.copy()
    for call in (lambda: rm.all_gather(out, inp, algorithm="nope"),
                 lambda: rm.all_gather(out, inp, segment_bytes=-1),
                 lambda: rm.reduce_scatter(out, inp, op="bor"),
                 lambda: rm.all_reduce(out, algorithm="direct", op="avg_of_nothing")):
        with pytest.raises((E, T)):
            call()
        assert (out == 3.5).all() and np.array_equal(inp, A)


# -- the ringccl command: exit code 2, stderr names the option and value -------------------------

CLI_CASES = [
    (["simulate", "allreduce"], r"argument collective: invalid choice: 'allreduce'"),
    (["simulate", "all_reduce", "-a", "rign", "-N", "4", "-c", "8"],
     r"algorithm='rign' is not available for all_reduce; expected one of ring"),
    (["simulate", "all_reduce", "--op", "add", "-N", "4", "-c", "8"],
     r"op='add' is not a reduce op; expected one of sum"),
    (["simulate", "all_reduce", "-N", "0"], r"argument --world-size/-N: 0 must be >= 1"),
    (["show", "all_reduce", "-N", "four"], r"argument --world-size/-N: 'four' is not an integer"),
    (["simulate", "all_reduce", "-c", "-1"], r"argument --count/-c: count '-1'"),
    (["simulate", "all_reduce", "-c", "1.5"], r"argument --count/-c: count '1\.5' must be a "
                                              r"whole number"),
    (["simulate", "broadcast", "--src", "4", "-N", "4", "-c", "8"],
     r"src=4 is out of range for world_size=4"),
    (["simulate", "gather", "--dst", "-1", "-N", "4", "-c", "8"],
     r"dst=-1 is out of range for world_size=4"),
    (["simulate", "broadcast", "--src", "1.5"], r"argument --src: invalid int value: '1\.5'"),
    (["show", "broadcast", "--root", "7", "-N", "4"], r"root=7 is out of range for world_size=4"),
    (["compare", "broadcast", "--root", "9", "-N", "4", "-c", "8"],
     r"root=9 is out of range for world_size=4"),
    (["simulate", "reduce", "--src", "1", "-N", "4", "-c", "8"],
     r"src=1 does not apply to reduce, which takes dst="),
    (["simulate", "all_reduce", "--dtype", "complex64"],
     r"argument --dtype: invalid choice: 'complex64'"),
    (["simulate", "all_reduce", "--op", "avg", "--dtype", "int32", "-N", "4", "-c", "8"],
     r"op=avg needs a floating dtype, got int32"),
    (["simulate", "all_reduce", "--op", "band", "-N", "4", "-c", "8"],
     r"op=band is bitwise and needs an integer or bool dtype, got float32"),
    (["simulate", "broadcast", "--segments", "0"], r"argument --segments: 0 must be >= 1"),
    (["show", "all_reduce", "--param", "foo=1", "-N", "4"],
     r"ring all_reduce takes the parameters \(none\); got foo"),
    # run: refused in this process, before any worker starts
    (["run", "all_reduce", "--op", "avg", "--dtype", "int32", "-n", "2", "-c", "8"],
     r"op=avg needs a floating dtype, got int32"),
    (["run", "all_reduce", "--op", "bxor", "-n", "2", "-c", "8"],
     r"op=bxor is bitwise and needs an integer or bool dtype, got float32"),
    (["run", "broadcast", "--src", "5", "-n", "2", "-c", "8"],
     r"src=5 is out of range for world_size=2"),
    (["run", "all_reduce", "-a", "rign", "-n", "2", "-c", "8"],
     r"algorithm='rign' is not available for all_reduce"),
    (["run", "all_reduce", "-n", "0"], r"argument --nproc/-n: 0 must be >= 1"),
    (["run", "all_reduce", "--warmup", "-1"], r"argument --warmup: -1 must be >= 0"),
    (["bench", "broadcast", "-r", "5", "-p", "2"], r"root=5 is out of range for world_size=2"),
    (["bench", "all_reduce", "-o", "avg", "-d", "int32", "-p", "2"],
     r"op=avg needs a floating dtype, got int32"),
    (["bench", "all_reduce", "-w", "-1", "-p", "2"], r"argument -w/--warmup-iters: -1 must be >= 0"),
]


@pytest.mark.parametrize("argv,pattern", CLI_CASES, ids=[" ".join(a) for a, _ in CLI_CASES])
def test_cli_refuses_bad_arguments_with_exit_code_2(capsys, monkeypatch, argv, pattern):
    started = []
    if not torch_missing:  # a refusal must come before any process starts
        import ringccl.torch.launch as tl
        monkeypatch.setattr(tl, "launch", lambda *a, **k: started.append(a) or [])
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert re.search(pattern, err), err
    assert "Traceback" not in err and not started
