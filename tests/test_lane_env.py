"""RINGCCL_LANE and RINGCCL_SHM_THREADS: their values, and a bad one refused by name; the C
helper's reductions against the backends' own, in parts and on threads."""

import os
import re

import pytest

from ringccl.backends.shm import lane
from ringccl.errors import ArgumentError


def _python(code: str, env: dict | None = None):
    """``code`` run by this interpreter in a fresh process (its CompletedProcess, text)."""
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.mark.parametrize("text,on,native", [("", True, True), ("1", True, True),
                                            ("on", True, True), ("0", False, True),
                                            ("OFF", False, True), ("python", True, False),
                                            (" Python ", True, False)])
def test_lane_env_values(monkeypatch, text, on, native):
    monkeypatch.setenv("RINGCCL_LANE", text)
    assert lane._from_env() == (on, native)


def test_the_extension_is_built():
    # CI machines have a C compiler: the optional extension must have built and imported, so
    # a failing build cannot hide behind the Python replay
    from ringccl.backends.shm import _lanec, lane_native
    assert lane_native.available() and lane.native()
    assert _lanec.HEADER_WORDS == lane_native.HEADER_WORDS
    assert _lanec.OP_WORDS == lane_native.OP_WORDS
    assert _lanec.MAX_THREADS == lane_native.MAX_THREADS


def test_a_build_of_another_version_replays_in_python():
    # an editable install keeps the extension built from an older checkout: its programs have
    # another layout, so the lane replays in Python (with a warning) instead of failing calls
    code = ("import logging; logging.basicConfig()\n"
            "from ringccl.backends.shm import _lanec\n"
            "_lanec.HEADER_WORDS -= 1\n"
            "from ringccl.backends.shm import lane, lane_native\n"
            "assert not lane_native.available() and not lane.native()\n")
    out = _python(code)
    assert out.returncode == 0, out.stderr
    assert "built from another version of ringccl" in out.stderr, out.stderr


def test_no_worker_thread_leaves_one_thread_on_the_whole_range(tmp_path):
    # pthread_create failing (a pids limit): the operation runs on the calling thread alone,
    # every byte of it and no byte past it (parts are whole cache lines; this size is not)
    import shutil
    import subprocess
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler builds the extension on every CI machine"
    shim = tmp_path / "fail_create.c"
    shim.write_text("#include <pthread.h>\n#include <errno.h>\n"
                    "int pthread_create(pthread_t *t, const pthread_attr_t *a,\n"
                    "                   void *(*f)(void *), void *arg)\n"
                    "{ (void)t; (void)a; (void)f; (void)arg; return EAGAIN; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "fail_create.so"), str(shim)],
                   check=True, timeout=120)
    code = ("import numpy as np\n"
            "from ringccl.backends.shm import _lanec\n"
            "n = (2 * _lanec.PART_BYTES + 4) // 4\n"
            "buf, ones = np.full(n + 16, 123, np.float32), np.ones(n + 16, np.float32)\n"
            "for threads in (2, 3, 2):\n"
            "    _lanec.combine(0, 0, 0, False, buf[:n], ones[:n], None, -1, 0, threads)\n"
            "assert (buf[:n] == 126).all() and (buf[n:] == 123).all(), buf[n - 2:n + 2]\n"
            "assert _lanec.workers() == 0\n")
    env = dict(os.environ, LD_PRELOAD=str(tmp_path / "fail_create.so"),
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")   # numpy's BLAS: no threads
    out = _python(code, env)
    assert out.returncode == 0, out.stderr


def test_lane_env_bad_value_names_it(monkeypatch):
    monkeypatch.setenv("RINGCCL_LANE", "maybe")
    monkeypatch.setitem(lane._state, "enabled", lane._from_env())
    with pytest.raises(ArgumentError, match="RINGCCL_LANE='maybe' must be '1' or 'on' .*"
                       "'python'"):
        lane.signature("all_reduce", 0)
    with pytest.raises(ArgumentError, match="RINGCCL_LANE"):
        lane.enabled()


def test_lane_off_gives_no_signature(monkeypatch):
    monkeypatch.setitem(lane._state, "enabled", False)
    assert lane.signature("all_reduce", 0) is None


@pytest.mark.parametrize("debug,compiled", [("INFO", False), ("TRACE", False), ("1", False),
                                            ("0", True), ("", True)])
def test_logged_or_checked_calls_are_never_compiled(monkeypatch, debug, compiled):
    # a replayed call would skip the general path's log line and cross-rank check
    monkeypatch.setitem(lane._state, "enabled", True)
    monkeypatch.setenv("RINGCCL_DEBUG", debug)
    assert (lane.signature("all_reduce", 0) is not None) is compiled


def test_the_key_follows_the_environment(monkeypatch):
    # the key reads the variables a call reads at every call: a change is a new signature
    monkeypatch.setitem(lane._state, "enabled", True)
    for name in lane._ENV:
        monkeypatch.delenv(name, raising=False)
    plain = lane.signature("all_reduce", 0)
    assert plain == lane.signature("all_reduce", 0)
    keys = {plain}
    for name, value in (("RINGCCL_TIMEOUT", "30"), ("RINGCCL_ALGO", "all_reduce:ring"),
                        ("RINGCCL_TRANSPORT", "shm"), ("RINGCCL_DEBUG", "0"),
                        ("RINGCCL_SHM_THREADS", "2")):
        monkeypatch.setenv(name, value)
        key = lane.signature("all_reduce", 0)
        assert key not in keys, name
        keys.add(key)
    assert [None if v is None else os.fsdecode(v) for v in lane._environment()] == \
        [os.environ.get(v) for v in lane._ENV]


def test_without_the_extension_the_lane_replays_in_python():
    # a machine without a C compiler installs without _lanec: the lane still imports, lowers
    # nothing for C and replays in Python
    code = ("import sys; sys.modules['ringccl.backends.shm._lanec'] = None\n"
            "import numpy as np\n"
            "from ringccl.backends.shm import lane, lane_native\n"
            "from ringccl.backends.mpi.executor import OPS\n"
            "from ringccl.ops import ReduceOp\n"
            "assert not lane_native.available() and not lane.native()\n"
            "assert lane_native.reduction(OPS.combine(ReduceOp.SUM), "
            "OPS.combine_into(ReduceOp.SUM), np.float32, ReduceOp.SUM) is None\n"
            "assert lane_native.native_runs() == 0\n"
            "print('python replay')\n")
    out = _python(code)
    assert out.returncode == 0 and "python replay" in out.stdout, out.stderr


def test_the_c_reductions_match_the_backends_on_random_spans():
    # beyond the lowering's probes: random lengths and offsets, special values mixed in, in
    # both operand orders (dst ⊕ src; src ⊕ dst, a receive from a peer below)
    np = pytest.importorskip("numpy")
    from ringccl.backends.mpi.executor import OPS
    from ringccl.backends.shm import _lanec, lane_native
    from ringccl.ops import ReduceOp
    rng = np.random.default_rng(7)
    for dtype in (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8):
        a, b = lane_native._probes(np.dtype(dtype))
        for op in (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX):
            verdict = lane_native.reduction(OPS.combine(op), OPS.combine_into(op), dtype, op)
            assert verdict is not None, (dtype, op)   # numpy's: all of them in C
            code, opc, rule, rule_left = verdict
            plain_a, plain_b = a[a == a], b[b == b]   # without NaN
            for k in range(120):
                # long spans cross the C loop's blocks (1,024 elements): mostly blocks without a
                # NaN operand (computed vectorised) and, in some, one NaN (element by element)
                n = int(rng.integers(1, 600 if k < 80 else 3000))
                o = int(rng.integers(0, 9))
                left = bool(rng.integers(0, 2))
                if k < 80:
                    x, y = rng.choice(a, o + n), rng.choice(b, o + n)
                else:
                    x, y = rng.choice(plain_a, o + n), rng.choice(plain_b, o + n)
                    if k % 2 and x.dtype.kind == "f":
                        x[int(rng.integers(o, o + n))] = np.nan
                theirs, mine = x.copy(), x.copy()
                with np.errstate(all="ignore"):
                    if left:
                        OPS.combine_into(op)(theirs[o:], y[o:], theirs[o:])
                    else:
                        OPS.combine(op)(theirs[o:], y[o:])
                # every other span also writes the result to a send area (a fused receive)
                also = np.full(n, 3, x.dtype) if k % 2 else None
                _lanec.combine(code, opc, rule_left if left else rule, left, mine[o:], y[o:],
                               *(() if also is None else (also,)))
                assert mine.tobytes() == theirs.tobytes(), (dtype, op, n, o, left)
                assert also is None or also.tobytes() == theirs[o:].tobytes(), (dtype, op, n)


def test_the_launchers_check_reads_the_variable_now(monkeypatch):
    # read afresh (the module read it at import): a launcher checks what its workers will read
    monkeypatch.setenv("RINGCCL_LANE", "maybe")
    with pytest.raises(ArgumentError, match="RINGCCL_LANE='maybe' must be '1' or 'on'"):
        lane.check_environment()
    monkeypatch.setenv("RINGCCL_LANE", "python")
    lane.check_environment()


def test_the_c_call_decides_as_the_python_one(monkeypatch):
    # _lanec.call (the front ends' replayed call) against lane._call_python, case by case: the
    # lane off or refused, logged calls, an unhashable part, an unknown signature, an entry
    # that runs, one that does not, one that raises
    from ringccl.backends.shm import lane_native
    if not lane_native.available():
        pytest.skip("the extension is not built (test_the_extension_is_built says so)")
    assert lane.call is lane_native._lanec.call
    for name in lane._ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setitem(lane._state, "enabled", True)
    ran = []
    hit, miss = ("all_reduce", "hit"), ("all_reduce", "miss")
    added = (lane.signature(*hit), lane.signature(*miss))
    lane._lanes[added[0]] = lambda g, b, k: ran.append((g, b, k)) or True
    lane._lanes[added[1]] = lambda g, b, k: False

    def both(parts):
        return [f(parts, "group", "buffer") for f in (lane.call, lane._call_python)]

    try:
        assert both(hit) == [True, True]
        assert ran == [("group", "buffer", lane.signature(*hit))] * 2
        assert both(miss) == [lane.signature(*miss)] * 2
        assert both(("all_reduce", "unknown")) == [lane.signature("all_reduce", "unknown")] * 2
        unhashable = ("all_reduce", ["a list"])
        assert both(unhashable) == [lane.signature(*unhashable)] * 2
        monkeypatch.setenv("RINGCCL_TIMEOUT", "30")   # a new signature: not the entry's
        assert both(hit)[0] == lane.signature(*hit) and len(ran) == 2
        monkeypatch.setenv("RINGCCL_DEBUG", "INFO")   # logged: the general path
        assert both(hit) == [None, None]
        monkeypatch.setenv("RINGCCL_DEBUG", "0")
        assert both(hit)[0] == lane.signature(*hit)
        monkeypatch.delenv("RINGCCL_DEBUG")
        monkeypatch.delenv("RINGCCL_TIMEOUT")
        lane._lanes[lane.signature(*miss)] = lambda g, b, k: 1 / 0
        for f in (lane.call, lane._call_python):
            with pytest.raises(ZeroDivisionError):
                f(miss, "group", "buffer")
        monkeypatch.setitem(lane._state, "enabled", False)
        assert both(hit) == [None, None]
        monkeypatch.setitem(lane._state, "enabled", ArgumentError("RINGCCL_LANE='x'"))
        for f in (lane.call, lane._call_python):
            with pytest.raises(ArgumentError, match="RINGCCL_LANE"):
                f(hit, "group", "buffer")
    finally:
        for key in added:
            lane._lanes.pop(key, None)


def test_a_combine_in_parts_gives_the_whole_combines_bits():
    # a reduction read from a peer's memory block by block (peer_memory) is combined part by
    # part: each part must give the bits of that part of one combine over the whole (the NaN
    # that survives two NaN operands depends on the position in the whole), any partition
    np = pytest.importorskip("numpy")
    from ringccl.backends.mpi.executor import OPS
    from ringccl.backends.shm import _lanec, lane_native
    from ringccl.ops import ReduceOp
    rng = np.random.default_rng(11)
    for dtype in (np.float32, np.float64, np.int32):
        a, b = lane_native._probes(np.dtype(dtype))
        for op in (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX):
            code, opc, rule, rule_left = lane_native.reduction(
                OPS.combine(op), OPS.combine_into(op), dtype, op)
            for k in range(40):
                n = int(rng.integers(1, 5000))
                left = bool(k % 2)
                x, y = rng.choice(a, n), rng.choice(b, n)
                r = rule_left if left else rule
                whole, parts = x.copy(), x.copy()
                also = np.zeros_like(x)
                _lanec.combine(code, opc, r, left, whole, y)
                cuts = np.unique(np.concatenate([[0, n], rng.integers(0, n, 4)]))
                size = x.itemsize
                for lo, hi in zip(cuts[:-1], cuts[1:]):
                    _lanec.combine(code, opc, r, left, parts[lo:hi], y[lo:hi], also[lo:hi],
                                   n * size, int(lo) * size)
                assert parts.tobytes() == whole.tobytes(), (dtype, op, n, list(cuts))
                assert also.tobytes() == whole.tobytes()
    with pytest.raises(ValueError):   # a part beyond the whole
        x = np.zeros(8, np.float32)
        _lanec.combine(0, 0, 0, False, x, x.copy(), None, 16, 4)


def test_a_combine_on_threads_gives_one_threads_bits():
    # a large operation is split over the C pool's threads (parts of at least PART_BYTES): the
    # bits of one thread's combine for any thread count, NaN probes at every position; a forked
    # child (the parent's workers not copied) splits as well and ends
    np = pytest.importorskip("numpy")
    from ringccl.backends.mpi.executor import OPS
    from ringccl.backends.shm import _lanec, lane_native
    from ringccl.ops import ReduceOp
    rng = np.random.default_rng(13)
    for dtype in (np.float32, np.float64, np.int16):
        a, b = lane_native._probes(np.dtype(dtype))
        for op in (ReduceOp.SUM, ReduceOp.MAX):
            code, opc, rule, rule_left = lane_native.reduction(
                OPS.combine(op), OPS.combine_into(op), dtype, op)
            part = _lanec.PART_BYTES   # split into 2 and 3 parts
            for n_bytes, left in ((2 * part + 24, False), (3 * part + 8, True)):
                n = n_bytes // np.dtype(dtype).itemsize
                x, y = rng.choice(a, n), rng.choice(b, n)
                r = rule_left if left else rule
                one, also_one = x.copy(), np.zeros_like(x)
                _lanec.combine(code, opc, r, left, one, y, also_one)
                for threads in (2, 3, 5):
                    many, also = x.copy(), np.zeros_like(x)
                    _lanec.combine(code, opc, r, left, many, y, also, -1, 0, threads)
                    assert many.tobytes() == one.tobytes(), (dtype, op, n, threads)
                    assert also.tobytes() == one.tobytes()
    assert _lanec.workers() >= 2   # split indeed: the pool started its workers
    x = np.ones(3 * _lanec.PART_BYTES // 4, np.float32)
    pid = os.fork()
    if pid == 0:   # pragma: no cover - the child
        _lanec.combine(0, 0, 0, False, x, x.copy(), None, -1, 0, 3)
        os._exit(0 if x[0] == 2 and _lanec.workers() == 2 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with pytest.raises(ValueError, match="threads >= 1"):
        _lanec.combine(0, 0, 0, False, x, x.copy(), None, -1, 0, 0)


@pytest.mark.parametrize("text,world_size,expected", [("3", 2, 3), (" 1 ", 8, 1),
                                                      ("64", 2, 64)])
def test_shm_threads_variable(monkeypatch, text, world_size, expected):
    from ringccl.backends.shm import lane_native
    monkeypatch.setenv("RINGCCL_SHM_THREADS", text)
    assert lane_native.threads(world_size) == expected


def test_shm_threads_default_shares_the_cores(monkeypatch):
    from ringccl.backends.shm import lane_native
    for name in ("RINGCCL_SHM_THREADS",) + lane_native.LOCAL_SIZE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(lane_native, "usable_cores", lambda: 16)
    assert [lane_native.threads(w) for w in (1, 2, 5, 8, 32)] == [4, 4, 3, 2, 1]
    # a subgroup of 2 among the launcher's 8 processes on this host: the 8 share the cores
    for name in lane_native.LOCAL_SIZE_VARIABLES:
        monkeypatch.setenv(name, "8")
        assert lane_native.threads(2) == 2, name
        monkeypatch.delenv(name)


@pytest.mark.parametrize("text", ["0", "65", "two", "1.5", "2_0", "+3", "-1"])
def test_shm_threads_bad_value_names_it(monkeypatch, text):
    from ringccl.backends.shm import lane_native, variables
    monkeypatch.setenv("RINGCCL_SHM_THREADS", text)
    message = f"RINGCCL_SHM_THREADS={text!r} must be an integer from 1 to 64"
    with pytest.raises(ArgumentError, match=re.escape(message)):
        lane_native.threads(2)
    with pytest.raises(ArgumentError, match="RINGCCL_SHM_THREADS"):   # a launcher's check
        variables.check_environment(("auto", "shm"))


def test_a_bad_shm_threads_value_is_refused_before_the_call(monkeypatch):
    # the first call of a signature compiles its lane: a value the compiled call would refuse
    # is refused before the call (its general path) moves any data
    monkeypatch.setenv("RINGCCL_SHM_THREADS", "many")
    ran = []
    with pytest.raises(ArgumentError, match="RINGCCL_SHM_THREADS='many'"):
        lane.first_call(("all_reduce", "new signature"), None, lambda: ran.append(1),
                        lambda: None)
    assert ran == []
    lane.first_call(None, None, lambda: ran.append(1), lambda: None)   # no lane: unread
    assert ran == [1]
