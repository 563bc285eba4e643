"""parse_op names a torch ReduceOp that ringccl does not support by its name."""

import pytest

from ringccl.errors import ArgumentError
from ringccl.ops import parse_op

dist = pytest.importorskip("torch.distributed")


def test_unsupported_torch_op_is_named_and_the_supported_ones_listed():
    with pytest.raises(ArgumentError) as info:
        parse_op(dist.ReduceOp.PREMUL_SUM)
    assert str(info.value) == ("op=PREMUL_SUM is not supported by ringccl; expected one of "
                               "sum, prod, min, max, avg, band, bor, bxor (also product, mean; "
                               "any case)")
    # a torch ReduceOp object (what _make_nccl_premul_sum returns) is named by its kind
    with pytest.raises(ArgumentError, match=r"^op=PREMUL_SUM is not supported"):
        parse_op(dist._make_nccl_premul_sum(2.0))
    assert parse_op("Mean").value == "avg" and parse_op("product").value == "prod"
    assert parse_op(dist.ReduceOp.PRODUCT).value == "prod"
