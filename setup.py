"""The compiled parts of wiremq: the codec's fast paths (modules/stomp/_fast.c) and the
audit journal's encoder (modules/journal/_encode.c).

Everything else is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "wiremq.modules.stomp._fast",
            ["modules/stomp/_fast.c"],
            extra_compile_args=["-O2", "-Wall", "-Werror"],
        ),
        Extension(
            "wiremq.modules.journal._encode",
            ["modules/journal/_encode.c"],
            extra_compile_args=["-O2", "-Wall", "-Werror"],
        ),
    ]
)
