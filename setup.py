"""The optional compiled helper of the shared-memory lane (metadata lives in pyproject.toml).

``ringccl.backends.shm._lanec`` is built with the system C compiler when there is one;
``optional=True``: without a compiler the install still succeeds and the lane replays in
Python (the same bits; docs/shm.md)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("ringccl.backends.shm._lanec",
                             sources=["src/ringccl/backends/shm/_lanec.c",
                                      "src/ringccl/backends/shm/_lanec_loop.c",
                                      "src/ringccl/backends/shm/_lanec_data.c"],
                             depends=["src/ringccl/backends/shm/_lanec.h"],
                             extra_compile_args=["-O3", "-std=c11"],
                             optional=True)])
