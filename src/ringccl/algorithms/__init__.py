"""Every algorithm as a schedule builder: the registry (:mod:`.registry`) and one family per file.

Importing this package registers the built-in families; a user's module that calls
:func:`register` adds to the same registry.
"""

from __future__ import annotations

from ._build import transfer_limit
from .registry import (DEFAULTS, REGISTRY, Algorithm, algorithms, build_schedule,
                       default_algorithm, get_algorithm, params_key, register)
from . import ring  # noqa: E402  (registers the ring family)
from . import direct  # noqa: E402  (direct sends; master all-reduce)
from . import binomial  # noqa: E402  (binomial-tree scatter, gather)
from . import (tree, recursive, bruck, pairwise, hierarchical,  # noqa: E402
               scatter_allgather)

# the families are imported for their register() calls; naming them here marks them as used
_FAMILIES = (ring, direct, binomial, tree, recursive, bruck, pairwise, hierarchical,
             scatter_allgather)

__all__ = ["Algorithm", "register", "get_algorithm", "algorithms", "build_schedule", "params_key",
           "REGISTRY", "DEFAULTS", "default_algorithm", "transfer_limit"]
