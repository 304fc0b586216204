"""The optional C scan of the token estimate (``ctxpress.tokens._scan``); everything else is in
pyproject.toml.

The extension is optional: where no C compiler is available the build skips it and ctxpress counts
with its pure-Python scan, which gives the same numbers. ``-ffp-contract=off`` keeps the compiler
from fusing a multiply and an add, so the C sums round exactly as Python's do.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ctxpress.tokens._scan",
            ["src/ctxpress/tokens/_scan.c"],
            optional=True,
            extra_compile_args=["-O2", "-ffp-contract=off"],
        )
    ]
)
