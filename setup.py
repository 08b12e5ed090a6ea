"""The one compiled part of wiremq: the codec's fast paths (modules/stomp/_fast.c).

Everything else is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "wiremq.modules.stomp._fast",
            ["modules/stomp/_fast.c"],
            extra_compile_args=["-O2", "-Wall", "-Werror"],
        )
    ]
)
