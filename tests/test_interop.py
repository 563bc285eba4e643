"""MSCCL XML export and Chrome/Perfetto traces.

The XML is checked by *running* it: a small interpreter of MSCCL's threadblock semantics (each
threadblock executes its steps in order, a step waits for its ``depid``/``deps`` step, sends and
receives between two ranks match in order) executes it in random and adversarial orders, and
the result must equal the schedule's BSP execution. A missing dependency shows up as a wrong
value or a deadlock.
"""

import json
import random
import xml.etree.ElementTree as ET
from collections import defaultdict, deque

import numpy as np
import pytest

import ringccl
from ringccl.algorithms import REGISTRY
from ringccl.errors import ArgumentError
from ringccl.views.interop import msccl_buffer, to_chrome_trace, to_msccl_xml

KEYS = sorted(REGISTRY)


def _params(key, n):
    import inspect
    return ({"root": (3 * n) // 4} if "root" in inspect.signature(REGISTRY[key].builder).parameters
            else {})


def _bsp(schedule, state):
    """Reference: run the schedule on one int64 value per (rank, chunk), BSP."""
    state = state.copy()
    for k in range(schedule.num_steps):
        lo, hi = schedule.step_ptr[k], schedule.step_ptr[k + 1]
        s, d = schedule.src[lo:hi], schedule.dst[lo:hi]
        sc, dc, red = schedule.src_chunk[lo:hi], schedule.dst_chunk[lo:hi], schedule.reduce[lo:hi]
        vals = state[s, sc].copy()
        np.add.at(state, (d[red], dc[red]), vals[red])  # several reduces may hit one slot
        state[d[~red], dc[~red]] = vals[~red]
    return state


def _run_xml(text, buffers, seed, recv_first):
    """Execute MSCCL XML on ``buffers[rank][buf]`` (dicts of int arrays); returns steps run."""
    algo = ET.fromstring(text)
    rng = random.Random(seed)
    tbs, pc = {}, {}
    for gpu in algo.findall("gpu"):
        rank = int(gpu.get("id"))
        for tb in gpu.findall("tb"):
            key = (rank, int(tb.get("id")))
            tbs[key] = (int(tb.get("send")), int(tb.get("recv")), tb.findall("step"))
            pc[key] = 0
    done, fifo, executed = set(), defaultdict(deque), 0
    while True:
        keys = list(tbs)
        rng.shuffle(keys)
        if recv_first:  # receive as early as possible: exposes missing write-after-read waits
            keys.sort(key=lambda k: tbs[k][1] < 0)
        progress = False
        for key in keys:
            rank, _ = key
            send, recv, steps = tbs[key]
            if pc[key] == len(steps):
                continue
            st = steps[pc[key]]
            depid, deps = int(st.get("depid")), int(st.get("deps"))
            if depid >= 0 and (rank, depid, deps) not in done:
                continue
            kind = st.get("type")
            buf = buffers[rank]
            src = (st.get("srcbuf"), int(st.get("srcoff")))
            dst = (st.get("dstbuf"), int(st.get("dstoff")))
            if kind == "s":
                fifo[(rank, send)].append(buf[src[0]][src[1]])
            elif kind in ("r", "rrc"):
                if not fifo[(recv, rank)]:
                    continue
                value = fifo[(recv, rank)].popleft()
                buf[dst[0]][dst[1]] = value + (buf[src[0]][src[1]] if kind == "rrc" else 0)
            elif kind == "cpy":
                buf[dst[0]][dst[1]] = buf[src[0]][src[1]]
            else:
                assert kind == "nop" and depid >= 0
            done.add((rank, key[1], int(st.get("s"))))
            pc[key] += 1
            executed += 1
            progress = True
            if not recv_first:
                break  # one step at a time, in random order
        if not progress:
            break
    stuck = {k: pc[k] for k in tbs if pc[k] < len(tbs[k][2])}
    assert not stuck, f"deadlock: threadblocks stopped at {stuck}"
    assert not any(fifo.values()), "messages left unreceived"
    return executed


def _check_structure(text, n):
    algo = ET.fromstring(text)
    assert algo.tag == "algo" and int(algo.get("ngpus")) == n
    assert algo.get("proto") == "Simple" and algo.get("inplace") == "1"
    gpus = algo.findall("gpu")
    assert [int(g.get("id")) for g in gpus] == list(range(n))
    for gpu in gpus:
        tbs = gpu.findall("tb")
        assert [int(t.get("id")) for t in tbs] == list(range(len(tbs)))
        peers = [(int(t.get("send")), int(t.get("recv"))) for t in tbs]
        assert len(set(peers)) == len(peers)
        depended = set()
        for t in tbs:
            send, recv = int(t.get("send")), int(t.get("recv"))
            assert send < 0 or recv < 0         # one peer, one direction per threadblock
            steps = t.findall("step")
            assert [int(s.get("s")) for s in steps] == list(range(len(steps)))
            for s in steps:
                kind = s.get("type")
                assert kind in {"s", "r", "rrc", "cpy", "nop"}
                assert kind != "s" or send >= 0
                assert kind not in ("r", "rrc") or recv >= 0
                depid, deps = int(s.get("depid")), int(s.get("deps"))
                if depid >= 0:
                    assert depid != int(t.get("id"))
                    assert 0 <= deps < len(tbs[depid].findall("step"))
                    depended.add((depid, deps))
        marked = {(int(t.get("id")), int(s.get("s"))) for t in tbs for s in t.findall("step")
                  if s.get("hasdep") == "1"}
        assert marked == depended


@pytest.mark.parametrize("key", KEYS, ids="/".join)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 8])
def test_msccl_xml_runs_like_the_schedule(key, n):
    s = ringccl.schedule(*key, world_size=n, **_params(key, n))
    text = to_msccl_xml(s)
    _check_structure(text, n)
    rng = np.random.default_rng(n)
    state = rng.integers(-1000, 1000, size=(n, s.num_chunks))
    want = state.copy()
    if s.collective == "all_to_all":  # the XML copies rank r's own block to o[r] first
        want[np.arange(n), n + np.arange(n)] = want[np.arange(n), np.arange(n)]
    want = _bsp(s, want)
    for seed in range(4):
        buffers = {}
        for r in range(n):
            buffers[r] = defaultdict(lambda: np.zeros(s.num_chunks, dtype=np.int64))
            for c in range(s.num_chunks):
                b, off = msccl_buffer(s, c)
                buffers[r][b][off] = state[r, c]
        executed = _run_xml(text, buffers, seed, recv_first=seed % 2 == 0)
        assert executed >= 2 * s.num_transfers
        got = np.array([[buffers[r][msccl_buffer(s, c)[0]][msccl_buffer(s, c)[1]]
                         for c in range(s.num_chunks)] for r in range(n)]).reshape(want.shape)
        assert np.array_equal(got, want), seed


def test_msccl_xml_of_the_ring_matches_the_format():
    text = to_msccl_xml(ringccl.schedule("all_reduce", "ring", world_size=4))
    algo = ET.fromstring(text)
    assert algo.get("coll") == "allreduce" and algo.get("nchunksperloop") == "4"
    gpu0 = algo.find("gpu")
    assert (gpu0.get("i_chunks"), gpu0.get("o_chunks"), gpu0.get("s_chunks")) == ("4", "4", "0")
    tbs = {(t.get("send"), t.get("recv")): t for t in gpu0.findall("tb")}
    assert set(tbs) == {("1", "-1"), ("-1", "3")}
    sends = [(s.get("type"), s.get("srcoff")) for s in tbs[("1", "-1")].findall("step")]
    assert sends[:3] == [("s", "0"), ("s", "3"), ("s", "2")]   # the ring's order for rank 0
    recvs = [s.get("type") for s in tbs[("-1", "3")].findall("step")]
    assert recvs == ["rrc"] * 3 + ["r"] * 3
    assert text.startswith('<algo name="ringccl_ring_all_reduce_4"')


def test_msccl_buffers_follow_the_collective():
    ag = ET.fromstring(to_msccl_xml(ringccl.schedule("all_gather", "bruck", world_size=4)))
    assert ag.get("coll") == "allgather"
    assert {s.get("srcbuf") for s in ag.iter("step")} == {"o"}
    assert ag.find("gpu").get("i_chunks") == "1" and ag.find("gpu").get("o_chunks") == "4"
    rs = ET.fromstring(to_msccl_xml(ringccl.schedule("reduce_scatter", "ring", world_size=4)))
    assert rs.get("coll") == "reducescatter" and rs.find("gpu").get("o_chunks") == "1"


def test_multiple_dependencies_become_nops():
    """The tree root's child waits for both children's receives before sending up: that is
    one dependency per step, so extra ones are nop steps (as msccl-tools writes them)."""
    text = to_msccl_xml(ringccl.schedule("all_reduce", "double_binary_tree", world_size=16))
    nops = [s for s in ET.fromstring(text).iter("step") if s.get("type") == "nop"]
    assert nops and all(int(s.get("depid")) >= 0 for s in nops)


# -- Chrome / Perfetto trace ----------------------------------------------------------------------

def test_chrome_trace_has_one_track_per_rank_and_an_event_per_transfer():
    s = ringccl.schedule("all_reduce", "tree", world_size=6)
    trace = json.loads(json.dumps(to_chrome_trace(s)))
    ev = trace["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    assert names == {r: f"R{r}" for r in range(6)}
    by_cat = defaultdict(list)
    for e in ev:
        if e["ph"] == "X":
            by_cat[e["cat"]].append(e)
    assert len(by_cat["send"]) == len(by_cat["recv"]) == s.num_transfers
    assert len(by_cat["reduce"]) == int(s.reduce.sum())
    assert sum(e["ph"] == "i" for e in ev) == s.num_steps
    assert sum(e["ph"] in ("s", "f") for e in ev) == 2 * s.num_transfers
    for e in by_cat["send"]:
        k = e["args"]["step"]
        assert e["ts"] == k and e["dur"] == 1 and e["tid"] == e["args"]["src"]
    for e in by_cat["reduce"]:
        assert e["ts"] == e["args"]["step"] + 0.5 and e["tid"] == e["args"]["dst"]
    assert trace["otherData"]["num_steps"] == s.num_steps


def test_chrome_trace_with_step_durations():
    s = ringccl.schedule("all_gather", "bruck", world_size=5)
    seconds = [1e-6 * (k + 1) for k in range(s.num_steps)]   # 1, 2, 3 µs
    ev = to_chrome_trace(s, step_seconds=seconds)["traceEvents"]
    starts = sorted({e["ts"] for e in ev if e.get("cat") == "send"})
    assert starts == pytest.approx([0.0, 1.0, 3.0])
    with pytest.raises(ArgumentError, match="step_seconds must be 3 durations"):
        to_chrome_trace(s, step_seconds=[1.0])
    with pytest.raises(ArgumentError, match="max_transfers=2"):
        to_chrome_trace(s, max_transfers=2)
