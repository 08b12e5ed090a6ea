"""Coverage-guided fuzzing of the STOMP codec (atheris, libFuzzer's engine), bounded in time.

Each input is a byte stream a client could send, with the decoder's version and
limits and the points where the socket splits it drawn from its first bytes.
For every input:

- decoding raises nothing but ``ProtocolError`` (anything else is a crash);
- the C fast path (``_fast.scan``) and the Python decoder give the same frames
  and the same error;
- a stream that decodes without error in one piece decodes to the same frames,
  without error, however the socket splits it, and the other way round;
- no frame is mis-framed: the decoded frames, encoded again and followed by a
  sentinel frame, decode to exactly those frames and the sentinel; and a
  decoder that ends between frames decodes a sentinel fed next exactly;
- for every frame decoded, the C MESSAGE tail (``_fast.message_tail``) is the
  escaping encoder's, wherever it takes the frame, and decodes back to the
  frame's headers and body.

    .venv/bin/python bench/fuzz_codec.py -max_total_time=600 fuzz-corpus/
    .venv/bin/python bench/fuzz_codec.py --coverage fuzz-corpus/ [more-corpora/ ...]

The first runs the fuzzer (any libFuzzer option: ``-runs=N``,
``-max_total_time=S``, ``-artifact_prefix=DIR/`` for what it finds, a corpus
folder it keeps its inputs in; STOMP's words come from ``fuzz_codec.dict``) and
prints libFuzzer's figures (``cov``: code edges reached in the instrumented
Python, ``ft``: features, ``#N``: inputs run). The second replays a corpus and
reports the lines of the decoder and the encoder it runs, in Python and in the
C fast paths (built once more with gcov's counters).
"""

from __future__ import annotations

import importlib
import inspect
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import trace
from pathlib import Path
from types import CodeType
from typing import Any

import atheris

with atheris.instrument_imports(include=["wiremq.modules.stomp"]):
    from wiremq.modules.stomp import _fast, codec, encoder
    from wiremq.modules.stomp.codec import DecoderLimits, FrameDecoder
    from wiremq.modules.stomp.encoder import encode_frame, escaped_message_tail
    from wiremq.modules.stomp.frames import Frame, ProtocolError

VERSIONS = (None, "1.0", "1.1", "1.2")
SENTINEL = Frame("SEND", {"destination": "/queue/sentinel", "content-length": "3"}, b"end")
SENTINEL_WIRE = b"SEND\ndestination:/queue/sentinel\ncontent-length:3\n\nend\0"
WIDE = DecoderLimits(1 << 20, 1000, 1 << 16)  # for frames re-encoded: within any limit
Outcome = tuple[list[Frame], Any]  # the frames, then the error (message, detail) or None


def _python_only(buf: bytes, pos: int, *rest: object) -> int:
    return pos  # the C scan taking nothing: every frame goes through the Python decoder


def decode(
    stream: bytes, cuts: list[int], version: str | None, limits: DecoderLimits
) -> tuple[Outcome, FrameDecoder]:
    """Feed ``stream`` in pieces cut at ``cuts``; the frames and the error it ends in."""
    decoder = FrameDecoder(limits)
    decoder.version = version
    frames: list[Frame] = []
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    try:
        for start, stop in zip(points, points[1:], strict=False):
            frames += decoder.feed(stream[start:stop])
        if version is None:  # CONNECT's decoder stops after each frame until told to go on
            while more := decoder.feed(b""):
                frames += more
    except ProtocolError as error:
        assert error.message, "a protocol error without a message"
        return (frames, (error.message, error.detail)), decoder
    return (frames, decoder.error and (decoder.error.message, decoder.error.detail)), decoder


def check_c_path(stream: bytes, cuts: list[int], version: str | None, limits: DecoderLimits):
    with_c, decoder = decode(stream, cuts, version, limits)
    codec.scan = _python_only
    try:
        python, _ = decode(stream, cuts, version, limits)
    finally:
        codec.scan = _fast.scan
    assert with_c == python, (with_c, python)
    return with_c, decoder


def check_chunking(
    whole: Outcome, complete: bool, stream: bytes, cuts: list[int], version, limits
) -> None:
    """The same frames however the stream is split; the same outcome for a stream that
    ends between frames. An unfinished frame may be refused sooner in pieces (a line
    already too long is seen before its frame ends), never a finished one."""
    if not cuts:
        return
    split, _ = decode(stream, cuts, version, limits)
    assert split[0] == whole[0], (whole, split)
    if whole[1] is not None:
        assert split[1] is not None, (whole, split)
    elif complete:
        assert split[1] is None, (whole, split)


def check_framing(frames: list[Frame], decoder: FrameDecoder, version: str | None) -> None:
    limits = decoder.limits
    fits = limits.max_body_bytes >= 3 and limits.max_headers >= 2
    fits = fits and limits.max_header_bytes >= len("destination:/queue/sentinel")
    if fits and decoder.error is None and decoder.buffered == 0 and version is not None:
        assert decoder.feed(SENTINEL_WIRE) == [SENTINEL]
    if version != "1.2":
        return  # only 1.2 escapes every header text; older versions cannot carry some
    wire = b"".join(
        encode_frame(f.command, f.headers.items(), f.body, version)
        for f in frames
        if f.command not in ("CONNECT", "STOMP", "CONNECTED") and not f.command.endswith("\r")
    )
    again = FrameDecoder(WIDE)
    again.version = version
    decoded = again.feed(wire + SENTINEL_WIRE)
    expected = [
        Frame(
            f.command,
            {**f.headers, "content-length": f.headers.get("content-length", str(len(f.body)))},
            f.body,
        )
        for f in frames
        if f.command not in ("CONNECT", "STOMP", "CONNECTED") and not f.command.endswith("\r")
    ]
    assert decoded[-1] == SENTINEL, decoded[-1:]
    assert [(f.command, f.body) for f in decoded[:-1]] == [(f.command, f.body) for f in expected]
    for got, want in zip(decoded, expected, strict=False):
        for name, value in want.headers.items():
            if name != "content-length":
                assert got.headers[name] == value, (name, got.headers, want.headers)


def check_message_tail(frame: Frame) -> None:
    headers = dict(frame.headers)
    destination = headers.pop("destination", "/queue/x")
    args = ("ID-1", destination, headers, frozenset({"content-length"}), frame.body, False)
    escaped = escaped_message_tail(*args, "1.2")
    plain = encoder.plain_message_tail(*args)
    assert plain is None or plain == escaped, (plain, escaped)
    tail = FrameDecoder(WIDE)
    tail.version = "1.2"
    [message] = tail.feed(b"MESSAGE\nsubscription:1\n" + escaped)
    assert message.body == frame.body
    assert message.headers["destination"] == destination
    for name, value in headers.items():
        if name != "content-length" and name not in ("subscription", "message-id", "redelivered"):
            assert message.headers[name] == value, (name, message.headers, headers)


def test_one_input(data: bytes) -> None:
    if len(data) < 5:
        return
    version = VERSIONS[data[0] % 4]
    limits = DecoderLimits(data[1] * 4, 1 + data[2] % 16, 1 + data[3] * 2)
    count = data[4] % 8 if len(data) > 12 else 0
    cuts = [data[5 + i] * 7 + i for i in range(count)]  # where the socket splits the stream
    stream = data[5 + count :]
    outcome, decoder = check_c_path(stream, cuts, version, limits)
    whole, in_one = decode(stream, [], version, limits)
    check_chunking(whole, in_one.buffered == 0, stream, cuts, version, limits)
    check_framing(outcome[0], decoder, version)
    for frame in outcome[0][:4]:
        check_message_tail(frame)


# -- coverage of a corpus -------------------------------------------------------------------


def coverage(corpora: list[str]) -> None:
    """Replay the ``corpora`` (folders) and report the lines they run, in Python and in C
    (gcov's counters are written when the replaying process ends, so a child replays)."""
    with tempfile.TemporaryDirectory(prefix="wiremq-gcov-") as folder:
        source = Path(__file__).resolve().parent.parent / "modules" / "stomp" / "_fast.c"
        shutil.copy(source, Path(folder) / "_fast.c")
        include = sysconfig.get_paths()["include"]
        built = f"_fast{sysconfig.get_config_var('EXT_SUFFIX')}"
        for step in (
            ["gcc", "-c", "-fPIC", "-O0", "--coverage", f"-I{include}", "_fast.c", "-o", "_fast.o"],
            ["gcc", "-shared", "--coverage", "_fast.o", "-o", built],
        ):
            subprocess.run(step, cwd=folder, check=True)
        subprocess.run([sys.executable, __file__, "--replay", folder, *corpora], check=True)
        done = subprocess.run(
            ["gcov", "-n", "_fast.c", "-o", "."], cwd=folder, capture_output=True, text=True
        )
        executed = [line for line in done.stdout.splitlines() if "executed" in line]
        print("_fast.c (gcov):", executed[0] if executed else done.stdout + done.stderr)


def replay(folder: str, corpora: list[str]) -> None:
    """Run every input of the ``corpora`` with the C fast paths built in ``folder``,
    counting the Python lines run."""
    sys.path.insert(0, folder)
    fast = importlib.import_module("_fast")
    codec.scan = _fast.scan = fast.scan  # the counted build serves both fast paths
    encoder.plain_message_tail = fast.message_tail
    inputs = [p.read_bytes() for c in corpora for p in sorted(Path(c).iterdir()) if p.is_file()]
    tracer = trace.Trace(count=True, trace=False)
    for data in inputs:
        tracer.runfunc(test_one_input, data)
    counts = tracer.results().counts
    print(f"corpus: {len(inputs)} inputs in {', '.join(corpora)}")
    for module in (codec, encoder):
        path = module.__file__
        assert path is not None
        executable = _body_lines(compile(Path(path).read_text(), path, "exec"))
        ran = {line for (file, line) in counts if file == path}
        print(
            f"{Path(path).name}: {len(ran & executable)} of {len(executable)} lines of its "
            "functions run"
        )


def _body_lines(code: CodeType) -> set[int]:
    """The lines of the functions (and methods) compiled in ``code``, their ``def`` lines
    left out: what runs when they are called, not when the module is imported."""
    lines: set[int] = set()
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            if constant.co_flags & inspect.CO_OPTIMIZED:  # a function, not a class body
                lines.update(
                    line
                    for _, _, line in constant.co_lines()
                    if line is not None and line != constant.co_firstlineno
                )
            lines |= _body_lines(constant)
    return lines


# A start for an empty corpus: valid streams, so that the fuzzer begins inside frames
# (content-length bodies pending over several pieces, escapes, CRLF lines, CONNECT, a body
# over its limit). The first five bytes pick the version (3: 1.2), the limits and how many
# cuts, the next ones where the cuts are; the stream follows.
SEEDS = [
    b"\x03\x20\x0f\x40\x03\x01\x02\x03"
    + b"SEND\ndestination:/queue/a\ncontent-length:5\nreceipt:r\\c1\n\nab\0cd\0",
    b"\x02\x20\x0f\x40\x03\x04\x05\x06" + b"SEND\r\ncontent-length:2\r\nx:y\r\n\r\nhi\0\r\n",
    b"\x01\x20\x0f\x40\x02\x09\x01" + b"\n\nMESSAGE\nx:y\n\nbody\0\nACK\nid:1\n\n\0",
    b"\x00\x20\x0f\x40\x01\x05" + b"CONNECT\naccept-version:1.2\n\n\0SEND\ndestination:/q\n\n\0",
    b"\x03\x01\x01\x08\x03\x02\x01\x03" + b"SEND\ncontent-length:9\n\n123456789\0",
]


def seed(corpus: Path) -> None:
    if corpus.is_dir() and not any(corpus.iterdir()):
        for number, data in enumerate(SEEDS):
            (corpus / f"seed-{number}").write_bytes(data)


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "--coverage":
        coverage(sys.argv[2:])
        return
    if len(sys.argv) >= 4 and sys.argv[1] == "--replay":
        replay(sys.argv[2], sys.argv[3:])
        return
    for argument in sys.argv[1:]:
        if not argument.startswith("-"):
            seed(Path(argument))
    arguments = list(sys.argv)
    if not any(a.startswith("-dict=") for a in arguments):
        arguments.append(f"-dict={Path(__file__).with_suffix('.dict')}")
    atheris.Setup(arguments, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
