"""The compiled parts of wiremq: the codec's fast paths (modules/stomp/_fast.c), the
thread that writes and syncs the write-ahead log without the GIL (server/_syncthread.c),
the audit journal's encoder (modules/journal/_encode.c), a selector's numbers
(modules/selector/_number.c) and how a Message is made and numbered (modules/_message.c).

Everything else is in pyproject.toml.
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall", "-Werror"]

setup(
    ext_modules=[
        Extension(name, [source], extra_compile_args=FLAGS)
        for name, source in (
            ("wiremq.modules.stomp._fast", "modules/stomp/_fast.c"),
            ("wiremq.server._syncthread", "server/_syncthread.c"),
            ("wiremq.modules.journal._encode", "modules/journal/_encode.c"),
            ("wiremq.modules.selector._number", "modules/selector/_number.c"),
            ("wiremq.modules._message", "modules/_message.c"),
        )
    ]
)
