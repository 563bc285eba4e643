"""User modules that register algorithms, imported before a command runs.

``ringccl --import my_algos ...`` (a module name, or a path to a ``.py`` file; repeatable) imports
each module in the CLI's process, and sets the environment variable :data:`ENV_VAR`
(``RINGCCL_IMPORT``, comma-separated) so that the worker processes ``run``, ``bench`` and
``train`` start, which inherit the environment, import the same modules before they build any
schedule: a registered algorithm is then known on every rank, as docs/contributing.md's
"import the file and the algorithm is everywhere" promises. Setting ``RINGCCL_IMPORT`` by hand
does the same for ``torchrun`` / ``mpirun`` launches.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from typing import Iterable

from .errors import ArgumentError

__all__ = ["ENV_VAR", "import_module", "import_user_modules", "is_file_spec", "parse_env"]

#: comma-separated module names or ``.py`` paths, imported by :func:`import_user_modules`
ENV_VAR = "RINGCCL_IMPORT"


def parse_env(value: str | None) -> list[str]:
    """The entries of a ``RINGCCL_IMPORT`` value: comma-separated, blanks dropped."""
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def is_file_spec(spec: str) -> bool:
    """True if ``spec`` names a file (ends in ``.py`` or holds a path separator), not a module."""
    return spec.endswith(".py") or os.sep in spec or bool(os.altsep and os.altsep in spec)


def import_module(spec: str):
    """Import ``spec``: a path to a ``.py`` file (anything ending in ``.py`` or containing a path
    separator) or a dotted module name; returns the module. A file is imported once per process
    (under a name made from its absolute path), so importing it again registers nothing twice.

    Raises:
        ArgumentError: the file does not exist or the module cannot be found (naming it). Errors
            raised by the module's own code become one ArgumentError naming the module, the
            file and line, and the exception (the original is its ``__cause__``).
    """
    if is_file_spec(spec):
        path = os.path.abspath(os.path.expanduser(spec))
        if not os.path.isfile(path):
            raise ArgumentError(f"--import {spec!r}: no such file {path}")
        stem = os.path.splitext(os.path.basename(path))[0]
        name = f"ringccl_user_{stem}_{hashlib.sha1(path.encode()).hexdigest()[:8]}"
        if name in sys.modules:
            return sys.modules[name]
        loader_spec = importlib.util.spec_from_file_location(name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise ArgumentError(f"--import {spec!r}: {path} cannot be imported as a module")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]  # a failed import leaves nothing half-registered behind
            raise _failed(spec, exc) from exc
        except BaseException:
            del sys.modules[name]
            raise
        return module
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if exc.name and spec.split(".")[0] == exc.name.split(".")[0]:
            raise ArgumentError(f"--import {spec!r}: no module named {exc.name!r} (give a module "
                                "on PYTHONPATH or a path to a .py file)") from None
        raise _failed(spec, exc) from exc  # a module the user's module imports is missing
    except Exception as exc:  # the module's own code raised
        raise _failed(spec, exc) from exc


def _failed(spec: str, exc: BaseException) -> ArgumentError:
    """The one-line error for a user module whose own code raised (where, and what)."""
    tb = exc.__traceback__
    where = ""
    while tb is not None:
        if tb.tb_frame.f_code.co_filename not in (__file__,) and "importlib" not in \
                tb.tb_frame.f_code.co_filename:
            where = f" at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" at {exc.filename}:{exc.lineno}"
    return ArgumentError(f"--import {spec!r} failed{where}: {type(exc).__name__}: {exc}")


def import_user_modules(specs: Iterable[str] | None = None) -> list:
    """Import ``specs`` (default: the entries of ``$RINGCCL_IMPORT``) in order; returns the
    modules. Worker entry points call it with no argument before building any schedule.

    Raises:
        ArgumentError: as :func:`import_module`.
    """
    if specs is None:
        specs = parse_env(os.environ.get(ENV_VAR))
    return [import_module(spec) for spec in specs]
