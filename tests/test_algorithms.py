"""The algorithm families beyond the ring: tree, double binary tree, recursive doubling/halving,
Bruck, pairwise, hierarchical and scatter + all-gather broadcast.

Every registered algorithm of these families is tested three ways: the symbolic checker for every
N in 1…256, the simulator against numpy (hypothesis), and its closed forms (steps, bytes of the
busiest rank, seconds on a flat network) against the schedule. Families whose collective
contract is not in ``ringccl.collectives`` yet (broadcast, reduce, all_to_all) are not
registered, so the registry-driven tests cover them once it is.
"""

import importlib
import inspect

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ringccl
from ringccl.algorithms import REGISTRY, get_algorithm
from ringccl.collectives import COLLECTIVES
from ringccl.errors import ArgumentError, ArgumentTypeError

tree = importlib.import_module("ringccl.algorithms.tree")
recursive = importlib.import_module("ringccl.algorithms.recursive")
bruck = importlib.import_module("ringccl.algorithms.bruck")
pairwise = importlib.import_module("ringccl.algorithms.pairwise")
hierarchical = importlib.import_module("ringccl.algorithms.hierarchical")
scatter_allgather = importlib.import_module("ringccl.algorithms.scatter_allgather")
direct = importlib.import_module("ringccl.algorithms.direct")

FAMILIES = {m.__name__ for m in (tree, recursive, bruck, pairwise, hierarchical,
                                 scatter_allgather)}
KEYS = sorted(k for k, a in REGISTRY.items() if a.builder.__module__ in FAMILIES
              or k == ("all_reduce", "two_shot"))   # direct.py's two-shot
ROOTED = sorted(k for k in KEYS if "root" in inspect.signature(REGISTRY[k].builder).parameters)


def _params(key, n, salt=0):
    """A root that varies with N (and salt) for rooted builders; nothing otherwise."""
    return {"root": (n * 7 + salt) % n} if key in ROOTED else {}


def _walk(schedule, nbytes, alpha, beta, gamma):
    """The flat-network cost of DESIGN.md, walked step by step (chunks fluid)."""
    n, c, t = schedule.world_size, schedule.num_chunks, schedule.num_steps
    if not t:
        return 0.0
    chunk = nbytes / c
    step = schedule.step_of(np.arange(schedule.num_transfers))

    def per(rank, weight=None):
        return np.bincount(step * n + rank, weights=weight, minlength=t * n).reshape(t, n)

    port = np.maximum(per(schedule.src), per(schedule.dst)).max(axis=1)
    reduced = per(schedule.dst, schedule.reduce.astype(float)).max(axis=1)
    return float((alpha + beta * chunk * port + gamma * chunk * reduced).sum())


def _input_bytes(schedule, chunk_bytes):
    """The M of an algorithm's closed forms: the whole working buffer, except all_to_all's
    (one rank's N input blocks)."""
    if schedule.collective == "all_to_all":
        return schedule.world_size * chunk_bytes
    return schedule.num_chunks * chunk_bytes


def test_families_are_registered():
    names = {(c, a) for c, a in KEYS}
    assert {("all_reduce", "tree"), ("all_reduce", "double_binary_tree"),
            ("all_reduce", "recursive_doubling"), ("all_reduce", "halving_doubling"),
            ("all_reduce", "hierarchical"), ("reduce_scatter", "halving_doubling"),
            ("all_gather", "recursive_doubling"), ("all_gather", "halving_doubling"),
            ("all_gather", "bruck")} <= names
    for coll, algo in [("broadcast", "tree"), ("reduce", "tree"),
                       ("broadcast", "scatter_allgather"), ("all_to_all", "bruck"),
                       ("all_to_all", "pairwise")]:
        assert ((coll, algo) in names) == (coll in COLLECTIVES)


# -- the checker, every N -------------------------------------------------------------------------

@pytest.mark.parametrize("key", KEYS, ids="/".join)
def test_verifies_for_every_world_size_up_to_256(key):
    for n in range(1, 257):
        ringccl.verify(ringccl.schedule(*key, world_size=n, **_params(key, n)))


@pytest.mark.parametrize("key", ROOTED, ids="/".join)
def test_rooted_verify_for_every_root(key):
    for n in range(1, 18):
        for root in range(n):
            ringccl.verify(ringccl.schedule(*key, world_size=n, root=root))


PIPELINED = [("all_reduce", tree.all_reduce), ("all_reduce", tree.double_binary_tree_all_reduce),
             ("reduce", tree.reduce), ("broadcast", tree.broadcast)]


@pytest.mark.parametrize("collective,builder", [p for p in PIPELINED if p[0] in COLLECTIVES],
                         ids=lambda p: getattr(p, "__name__", p))
@pytest.mark.parametrize("segments", [2, 3, 7])
def test_pipelined_trees_verify_and_count_steps(collective, builder, segments):
    for n in range(1, 70):
        kw = {"root": n // 3} if collective in ("reduce", "broadcast") else {}
        s = ringccl.verify(builder(n, segments=segments, **kw))
        assert s.num_chunks == segments * (2 if "double" in builder.__name__ else 1)
        assert s.num_steps == tree.num_steps(collective, n, segments)


# -- closed forms ---------------------------------------------------------------------------------

@pytest.mark.parametrize("key", KEYS, ids="/".join)
def test_closed_forms_equal_the_schedule(key):
    """Steps, bytes of the busiest rank and flat-network seconds, N <= 256 (fluid chunks: the
    buffer is a multiple of num_chunks, so the byte counts are exact)."""
    algo = get_algorithm(*key)
    alpha, beta, gamma = 5e-6, 1 / 50e9, 1 / 200e9
    for n in list(range(1, 100)) + [127, 128, 129, 192, 255, 256]:
        s = ringccl.schedule(*key, world_size=n, **_params(key, n, salt=3))
        assert s.num_steps == algo.num_steps(n), n
        chunk_bytes = 1024
        m = _input_bytes(s, chunk_bytes)
        # the contract's M: all_to_all's chunks are blocks of M/N (M = one rank's N inputs)
        sent = s.bytes_sent(m, 1)
        assert sent.max() == pytest.approx(algo.bytes_sent(n, m)), n
        assert algo.time is not None
        assert algo.time(n, m, alpha, beta, gamma) == pytest.approx(
            _walk(s, s.num_chunks * chunk_bytes, alpha, beta, gamma), rel=1e-12), n


def test_tree_reduce_start_closed_form_matches_the_tree():
    for n in list(range(2, 600)) + [1023, 1024, 1025, 4096, 5000]:
        t = tree.binary_tree(n)
        top = 1 << ((n - 1).bit_length() - 1)
        assert tree.reduce_start(n) == t.start[top], n
    for d in range(1, 13):
        assert tree.reduce_start(1 << d) == d - 1


# -- the simulator against numpy ------------------------------------------------------------------

SIM_KEYS = [k for k in KEYS if k[0] in ("all_reduce", "reduce_scatter", "all_gather")]
OTHER_KEYS = [k for k in KEYS if k not in SIM_KEYS]
DTYPES = ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool"]


@st.composite
def sim_cases(draw, keys):
    key = draw(st.sampled_from(keys))
    n = draw(st.integers(1, 20))
    count = draw(st.one_of(st.sampled_from([0, 1, max(n - 1, 0), n, n + 1, 2 * n + 3]),
                           st.integers(0, 200)))
    dtype = draw(st.sampled_from(DTYPES))
    ops = (["sum", "prod", "min", "max", "avg"] if dtype.startswith("float")
           else ["sum", "prod", "min", "max", "band", "bor", "bxor"])
    return key, n, count, dtype, draw(st.sampled_from(ops)), draw(st.integers(0, 2**32 - 1))


def _inputs(seed, n, count, dtype):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=(n, count)).astype(bool)
    if dtype.kind == "f":
        return rng.standard_normal((n, count)).astype(dtype)
    return rng.integers(-8 if dtype.kind == "i" else 0, 8, size=(n, count)).astype(dtype)


@given(sim_cases(SIM_KEYS))
def test_simulation_matches_numpy(case):
    (collective, algorithm), n, count, dtype, op, seed = case
    x = _inputs(seed, n, count, dtype)
    if collective == "all_gather":
        count = x.shape[1]
    r = ringccl.simulate(collective, x, op=op, algorithm=algorithm)
    assert r.matches_reference, (r.mismatches, r.max_abs_error)
    # an independent look at the result for the exact dtypes
    if x.dtype.kind != "f":
        if collective == "all_gather":
            assert np.array_equal(r.outputs, np.broadcast_to(x.reshape(-1), (n, n * count)))
        elif op == "sum":
            total = x.sum(axis=0, dtype=x.dtype)
            if collective == "all_reduce":
                assert np.array_equal(r.outputs, np.broadcast_to(total, (n, count)))
            else:
                for rank, block in enumerate(np.array_split(total, n)):
                    assert np.array_equal(np.asarray(r.outputs[rank]), block)


@pytest.mark.skipif(not OTHER_KEYS, reason="no broadcast/reduce/all_to_all contracts yet "
                    "(they come with the primitives' contracts)")
@given(sim_cases(OTHER_KEYS or [("x", "y")]))
def test_rooted_and_all_to_all_simulation_matches_numpy(case):
    key, n, count, dtype, op, seed = case
    if key[0] == "all_to_all":
        count = n * (count // n)   # equal blocks
    x = _inputs(seed, n, count, dtype)
    r = ringccl.simulate(key[0], x, op=op, algorithm=key[1], **_params(key, n, salt=seed))
    assert r.matches_reference, (r.mismatches, r.max_abs_error)


def test_float_sums_stay_within_the_stated_bound():
    """Every all_reduce order keeps |error| <= (N-1)·eps·Σ|x| (Higham, section 4.2)."""
    x = np.random.default_rng(1).standard_normal((37, 5001)).astype(np.float32)
    ref = x.astype(np.float64).sum(axis=0)
    bound = 36 * np.finfo(np.float32).eps * np.abs(x.astype(np.float64)).sum(axis=0)
    for name in ringccl.algorithms("all_reduce"):
        out = ringccl.simulate("all_reduce", x, algorithm=name, check=False).outputs
        assert (np.abs(out - ref) <= bound).all(), name


# -- structure ------------------------------------------------------------------------------------

def test_tree_shape_is_nccls_in_order_tree():
    t = tree.binary_tree(8)
    assert t.parent.tolist() == [-1, 2, 4, 2, 0, 6, 4, 6]
    assert t.depth.max() == 3
    t = tree.binary_tree(6)  # 4's right child is 5 (4 + 2 is out of range)
    assert t.parent.tolist() == [-1, 2, 4, 2, 0, 4]
    for n in range(2, 300):
        t = tree.binary_tree(n)
        assert t.depth.max() == (n - 1).bit_length()
        children = np.bincount(t.parent[1:], minlength=n)
        assert children.max() <= 2 and children[0] == 1
        assert (children[1::2] == 0).all()                 # odd ranks are the leaves


def test_a_rank_starts_after_its_children_at_its_subtree_height():
    """Both children may reduce into their parent in one step; a rank sends once its deeper
    child has delivered, i.e. at the height of its subtree (the lowest set bit of v)."""
    for n in range(2, 200):
        t = tree.binary_tree(n)
        v = np.nonzero(t.parent >= 1)[0]          # children of non-root ranks
        assert (t.start[v] < t.start[t.parent[v]]).all()
        ranks = np.arange(1, n)
        assert (t.start[1:] == np.log2(ranks & -ranks).astype(int)).all()
        both = (t.left >= 0) & (t.right >= 0)
        if n >= 4:  # some parent absorbs both children in the same step
            assert (t.start[t.left[both]] == t.start[t.right[both]]).any()


@pytest.mark.parametrize("n", [2, 4, 8, 10, 64, 100, 256])
def test_double_binary_tree_leaves_complement_each_other(n):
    """Even N: every rank is a leaf in exactly one of the two trees (Sanders et al. 2009)."""
    t = tree.binary_tree(n)
    leaf_a = np.bincount(t.parent[1:], minlength=n) == 0
    role = tree.second_tree_roles(n)
    leaf_b = leaf_a[role]
    assert (leaf_a ^ leaf_b).all()


@pytest.mark.parametrize("n", [3, 5, 7, 9, 63, 255])
def test_double_binary_tree_odd_n_only_rank_0_is_interior_twice(n):
    t = tree.binary_tree(n)
    leaf_a = np.bincount(t.parent[1:], minlength=n) == 0
    leaf_b = leaf_a[tree.second_tree_roles(n)]
    assert not leaf_a[0] and not leaf_b[0]
    assert (leaf_a[1:] ^ leaf_b[1:]).all()


def test_double_binary_tree_halves_the_busiest_port():
    """Two trees (Sanders et al. 2009): one tree moves 3M through its busiest rank, two trees
    2M each way."""
    for n in (16, 100, 256):
        m = 1024 * 2 * n
        one = ringccl.schedule("all_reduce", "tree", world_size=n).bytes_sent(m, 1)
        two = ringccl.schedule("all_reduce", "double_binary_tree", world_size=n).bytes_sent(m, 1)
        assert one.max() == 3 * m and two.max() == 2 * m
        assert two.min() >= m // 2


def test_tree_steps_are_logarithmic_and_segments_add_steps():
    # 2⌈log2 N⌉ unpipelined, as the issue and NCCL's tree
    for n in (2, 3, 4, 5, 8, 100, 1024, 1025):
        d = (n - 1).bit_length()
        assert ringccl.schedule("all_reduce", "tree", world_size=n).num_steps == 2 * d
        assert ringccl.schedule("all_reduce", "double_binary_tree", world_size=n).num_steps == 2 * d
        assert ringccl.schedule("reduce", "tree", world_size=n).num_steps == d
        assert ringccl.schedule("broadcast", "tree", world_size=n).num_steps == d
    steps = [tree.all_reduce(64, segments=s).num_steps for s in (1, 2, 4, 8)]
    assert steps == [12, 13, 15, 19]      # U + S + D = 5 + S + 6


@pytest.mark.parametrize("n", [2, 4, 8, 32])
def test_recursive_doubling_talks_only_to_xor_partners(n):
    for name in ("recursive_doubling", "halving_doubling"):
        s = ringccl.schedule("all_reduce", name, world_size=n)
        diff = s.src ^ s.dst
        assert ((diff & (diff - 1)) == 0).all()        # a single bit
        assert s.num_steps == (2 if name == "halving_doubling" else 1) * (n.bit_length() - 1)


@pytest.mark.parametrize("n", [3, 5, 6, 7, 12, 100])
def test_non_power_of_two_folds_the_extra_ranks(n):
    p = 1 << (n.bit_length() - 1)
    for key in [("all_reduce", "recursive_doubling"), ("all_reduce", "halving_doubling"),
                ("reduce_scatter", "halving_doubling"), ("all_gather", "recursive_doubling")]:
        s = ringccl.schedule(*key, world_size=n)
        assert s.phase_names[0] == "fold" and s.phase_names[-1] == "unfold"
        extra = (s.src >= p) | (s.dst >= p)
        first, last = s.step_of(np.nonzero(extra)[0]), s.num_steps - 1
        assert set(first.tolist()) <= {0, last}
        pairs = {(int(a), int(b)) for a, b in zip(s.src[extra], s.dst[extra])}
        assert all(max(a, b) - min(a, b) == p for a, b in pairs)


def test_bruck_all_gather_sends_to_r_minus_2k():
    for n in (5, 8, 13):
        s = ringccl.schedule("all_gather", "bruck", world_size=n)
        assert s.num_steps == (n - 1).bit_length()
        for k in range(s.num_steps):
            st_ = s.steps[k]
            assert ((st_.src - st_.dst) % n == (1 << k) % n).all()
            assert len(st_) == n * min(1 << k, n - (1 << k))


def test_bruck_all_to_all_offsets():
    assert bruck.offsets_with_bit(8, 0).tolist() == [1, 3, 5, 7]
    assert bruck.offsets_with_bit(6, 2).tolist() == [4, 5]
    for n in range(1, 40):
        s = bruck.all_to_all(n)
        assert s.num_steps == (n - 1).bit_length() and s.num_chunks == 2 * n
        for k in range(s.num_steps):
            st_ = s.steps[k]
            assert ((st_.dst - st_.src) % n == (1 << k) % n).all()
        # every block ends in an output slot; only own blocks stay where they are
        assert (s.dst_chunk < 2 * n).all()


def test_pairwise_is_a_permutation_each_step():
    for n in (2, 3, 6, 8, 16):
        s = pairwise.all_to_all(n)
        assert s.num_steps == n - 1
        for k, st_ in enumerate(s.steps):
            assert sorted(st_.src.tolist()) == list(range(n))
            assert sorted(st_.dst.tolist()) == list(range(n))
            if n & (n - 1) == 0:
                assert (st_.src ^ st_.dst == k + 1).all()
            else:
                assert ((st_.dst - st_.src) % n == k + 1).all()
            assert (st_.dst_chunk == n + st_.src).all()


def test_hierarchical_default_local_size_and_errors():
    assert [hierarchical.default_local_size(n) for n in (1, 7, 8, 11, 12, 1024)] == \
        [1, 7, 8, 1, 6, 8]
    with pytest.raises(ArgumentError, match="local_size=3 must divide world_size=8"):
        hierarchical.all_reduce(8, local_size=3)
    with pytest.raises(ArgumentError, match="local_size=0"):
        hierarchical.all_reduce(8, local_size=0)
    for n, loc in [(12, 1), (12, 12), (12, 3), (12, 4), (16, 2), (30, 5)]:
        s = ringccl.verify(hierarchical.all_reduce(n, local_size=loc))
        assert s.params == {"local_size": loc}
        assert s.num_steps == hierarchical.num_steps(n, loc)


def test_hierarchical_crosses_nodes_only_between_same_local_ranks():
    """128 nodes × 8 GPUs: only the 2(nodes-1) inter-node steps leave a node, each
    between ranks with the same local rank (one NIC each, rail-aligned)."""
    n, loc = 1024, 8
    s = hierarchical.all_reduce(n, local_size=loc)
    cross = s.src // loc != s.dst // loc
    assert (s.src[cross] % loc == s.dst[cross] % loc).all()
    assert len(np.unique(s.step_of(np.nonzero(cross)[0]))) == 2 * (n // loc - 1)
    assert s.num_steps == 2 * 7 + 2 * 127
    # inter-node bytes of one rank: 2(nodes-1)/nodes of its 1/L share
    m = n * 64
    per_rank = np.bincount(s.src[cross], minlength=n) * (m // n)
    assert per_rank.max() == 2 * 127 * m // n


ONE_WAY = ("reduce_scatter", "all_gather")


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@pytest.mark.parametrize("collective", ONE_WAY)
def test_hierarchical_one_way_verifies_for_every_local_size(collective):
    """N = 1…32 and every L dividing N (L = 1 and L = N: one flat ring); (L-1) + (N/L-1) steps,
    each phase named, the inter-node phase first for all_gather and last for reduce_scatter."""
    builder = getattr(hierarchical, collective)
    first, second = (("intra-node reduce-scatter", "inter-node reduce-scatter")
                     if collective == "reduce_scatter"
                     else ("inter-node all-gather", "intra-node all-gather"))
    for n in range(1, 33):
        for loc in _divisors(n):
            s = ringccl.verify(builder(n, local_size=loc))
            assert s.params == {"local_size": loc} and s.num_chunks == n
            assert s.num_steps == hierarchical.one_way_num_steps(n, loc) == n // loc + loc - 2
            k = (loc if collective == "reduce_scatter" else n // loc) - 1
            assert s.phase_names == (first,) * k + (second,) * (s.num_steps - k), (n, loc)
            # the registry builds the same schedule
            r = ringccl.schedule(collective, "hierarchical", world_size=n, local_size=loc)
            assert np.array_equal(r.src, s.src) and np.array_equal(r.src_chunk, s.src_chunk)
    with pytest.raises(ArgumentError, match="local_size=3 must divide world_size=8"):
        builder(8, local_size=3)
    with pytest.raises(ArgumentError, match="local_size=0"):
        builder(8, local_size=0)
    with pytest.raises(ArgumentTypeError, match="local_size=2.0"):
        builder(8, local_size=2.0)


@pytest.mark.parametrize("collective", ONE_WAY)
def test_hierarchical_one_way_bytes_steps_and_node_crossings(collective):
    """Every rank sends (N-1)/N · M, the flat ring's volume; only the P-1 inter-node steps
    leave a node, each between ranks of the same local rank, and each carries one block, so a
    rank's inter-node bytes are (P-1)/N · M. The closed forms with an explicit local_size
    equal the schedule and the flat-network walk."""
    algo = get_algorithm(collective, "hierarchical")
    alpha, beta, gamma = 5e-6, 1 / 50e9, 1 / 200e9
    for n in (1, 2, 4, 6, 8, 12, 16, 24, 30, 32, 64):
        for loc in _divisors(n):
            nodes = n // loc
            s = ringccl.schedule(collective, "hierarchical", world_size=n, local_size=loc)
            m = n * 64                                # 64 bytes per block
            sent = s.bytes_sent(m, 1)
            assert (sent == (n - 1) * 64).all(), (n, loc)
            assert algo.bytes_for(n, m, local_size=loc) == (n - 1) * 64
            cross = s.src // loc != s.dst // loc
            assert (s.src[cross] % loc == s.dst[cross] % loc).all()
            inter = {i for i, name in enumerate(s.phase_names) if name.startswith("inter")}
            assert set(s.step_of(np.nonzero(cross)[0]).tolist()) == inter
            assert len(inter) == nodes - 1
            # one block per inter-node step: (P-1)/N · M of every rank crosses nodes
            assert (np.bincount(s.src[cross], minlength=n) == nodes - 1).all(), (n, loc)
            assert algo.steps_for(n, local_size=loc) == s.num_steps
            assert algo.time_for(n, m, alpha, beta, gamma, local_size=loc) == pytest.approx(
                _walk(s, m, alpha, beta, gamma), rel=1e-12), (n, loc)


@pytest.mark.parametrize("collective", ONE_WAY)
@pytest.mark.parametrize("n,loc", [(1, 1), (2, 1), (2, 2), (4, 2), (6, 2), (6, 3), (8, 4),
                                   (9, 3), (12, 4), (12, 6), (16, 16)])
def test_hierarchical_one_way_simulation_matches_numpy(collective, n, loc):
    """Counts 0, 1, < N, N, not divisible by N and larger, every op on integer and float
    dtypes; integer sums also checked block by block against numpy."""
    counts = sorted({0, 1, max(n - 1, 0), n, n + 1, 3 * n + 2, 101})
    for dtype in ("int64", "int8", "uint8", "bool", "float32", "float64", "float16"):
        ops = (["sum", "prod", "min", "max", "avg"] if dtype.startswith("float")
               else ["sum", "min", "max", "band", "bor", "bxor"])
        for count in counts:
            for op in ops:
                x = _inputs(count * 31 + len(op), n, count, dtype)
                r = ringccl.simulate(collective, x, op=op, algorithm="hierarchical",
                                     local_size=loc)
                assert r.matches_reference, (dtype, count, op, r.mismatches)
                if x.dtype.kind == "f":
                    continue
                if collective == "all_gather":
                    assert np.array_equal(r.outputs, np.broadcast_to(x.reshape(-1),
                                                                     (n, n * count)))
                elif op == "sum":
                    total = x.sum(axis=0, dtype=x.dtype)
                    for rank, block in enumerate(np.array_split(total, n)):
                        assert np.array_equal(np.asarray(r.outputs[rank]), block)


@pytest.mark.parametrize("collective", ONE_WAY)
def test_hierarchical_one_way_walked_on_a_two_level_machine(collective):
    """16 nodes × 8 ranks, NVLink-class inside, one 50 GB/s NIC per rank across (the cost
    model fills local_size from the machine): L-1 NVLink steps of M/L and P-1 NIC steps of M/N,
    every NIC of a node used for (P-1)/N · M, where the node-major flat ring pushes
    (N-1)/N · M through one NIC per node."""
    from ringccl.costmodel.topology import two_level
    nodes, loc, m = 16, 8, 2**30
    n = nodes * loc
    topo = two_level(nodes, loc, intra=("5us", "900GB/s"), inter=("5us", "50GB/s"))
    h = ringccl.cost(collective, "hierarchical", None, m, topology=topo)
    ring = ringccl.cost(collective, "ring", None, m, topology=topo)
    assert h.seconds == pytest.approx((loc - 1) * (5e-6 + m / loc / 900e9)
                                      + (nodes - 1) * (5e-6 + m / n / 50e9), rel=1e-9)
    nic = h.link_bytes[topo.link_ids("nic out", node=0)]
    assert nic == pytest.approx(np.full(loc, (nodes - 1) / n * m))
    assert ring.max_link_bytes["nic out"] == pytest.approx((n - 1) / n * m)
    assert h.seconds < ring.seconds / 5


def test_hierarchical_one_way_degenerates_to_the_flat_ring():
    """L = 1 and L = N: the same transfers as the ring of the collective."""
    for collective in ONE_WAY:
        for n in (1, 2, 5, 8):
            ring = ringccl.schedule(collective, "ring", world_size=n)
            for loc in {1, n}:
                s = ringccl.schedule(collective, "hierarchical", world_size=n, local_size=loc)
                assert s.num_steps == ring.num_steps
                key = np.lexsort
                a = key((s.src_chunk, s.dst, s.src, s.step_of(np.arange(s.num_transfers))))
                b = key((ring.src_chunk, ring.dst, ring.src,
                         ring.step_of(np.arange(ring.num_transfers))))
                assert np.array_equal(s.src[a], ring.src[b]), (collective, n, loc)
                assert np.array_equal(s.dst[a], ring.dst[b])
                assert np.array_equal(s.src_chunk[a], ring.src_chunk[b])
                assert np.array_equal(s.reduce[a], ring.reduce[b])


def test_scatter_allgather_never_sends_into_the_root():
    if "broadcast" not in COLLECTIVES:
        s = scatter_allgather.broadcast(9, root=4)
    else:
        s = ringccl.schedule("broadcast", "scatter_allgather", world_size=9, root=4)
    assert not (s.dst == 4).any()
    assert s.phase_names.count("scatter") == 4 and s.phase_names.count("all-gather") == 8
    assert s.params == {"root": 4}


@pytest.mark.skipif("broadcast" not in COLLECTIVES,
                    reason="needs the broadcast contract")
@pytest.mark.parametrize("count", [0, 1, 3, 8, 9, 100])
def test_scatter_allgather_with_fewer_elements_than_ranks(count):
    x = np.arange(9 * count, dtype=np.int64).reshape(9, count)
    r = ringccl.simulate("broadcast", x, algorithm="scatter_allgather", root=2)
    assert r.matches_reference


@pytest.mark.parametrize("call,error,match", [
    (lambda: tree.reduce(4, root=4), ArgumentError,
     "root=4 is out of range for world_size=4; root must be an integer rank in \\[0, 4\\)"),
    (lambda: tree.broadcast(4, root=-1), ArgumentError, "root=-1"),
    (lambda: tree.all_reduce(4, segments=0), ArgumentError, "segments=0 must be an integer >= 1"),
    (lambda: tree.double_binary_tree_all_reduce(4, segments=1.5), ArgumentTypeError,
     "segments=1.5"),
    (lambda: scatter_allgather.broadcast(3, root=True), ArgumentTypeError, "root=True"),
])
def test_bad_parameters_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_cached_schedules_do_not_answer_equal_values_of_other_types():
    # 2.0 == 2 and True == 1: a schedule cached for segments=2 (or 1) must not skip the check
    from ringccl.algorithms import build_schedule
    from ringccl.errors import ArgumentTypeError
    build_schedule("broadcast", "tree", 4, root=0, segments=2)
    build_schedule("broadcast", "tree", 4, root=0, segments=1)
    for bad in (2.0, True):
        with pytest.raises(ArgumentTypeError, match=f"segments={bad!r} must be an integer"):
            build_schedule("broadcast", "tree", 4, root=0, segments=bad)
    for bad in ([2], np.array(2)):  # unhashable: not cached, checked by the builder
        with pytest.raises(ArgumentTypeError, match="must be an integer >= 1, got"):
            build_schedule("broadcast", "tree", 4, root=0, segments=bad)
    assert build_schedule("broadcast", "tree", 4, root=0, segments=np.int64(2)).params[
        "segments"] == 2
