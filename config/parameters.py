"""Every parameter the server has, in one table.

Group and parameter names follow the iBus//MessageServer manual where it has
them; defaults are the manual's where it gives one, otherwise a documented
choice of ours.
"""

from __future__ import annotations

from wiremq.config.registry import Parameter, Registry

KIB = 1024
MIB = 1024 * 1024

PARAMETERS = [
    # -- the server process ------------------------------------------------------------
    Parameter("Server", "datadir", str, "data", "Folder for the server's stores and files"),
    Parameter(
        "Server",
        "loglevel",
        str,
        "info",
        "Lowest level of log events written",
        choices=("debug", "info", "warning", "error"),
        live=True,
    ),
    Parameter(
        "Server",
        "logformat",
        str,
        "console",
        "How log events are written: readable lines or one JSON object per line",
        choices=("console", "json"),
    ),
    # -- the STOMP listener and its connections ------------------------------------------
    Parameter("StompListener", "host", str, "127.0.0.1", "Address the STOMP listener binds"),
    Parameter(
        "StompListener",
        "port",
        int,
        61613,
        "TCP port of the STOMP listener (0 picks a free port)",
        minimum=0,
        maximum=65535,
    ),
    Parameter(
        "StompListener",
        "heartbeatsend",
        int,
        10000,
        "Interval at which the server offers to send heart-beats (0: never)",
        unit="ms",
        minimum=0,
        maximum=3_600_000,
    ),
    Parameter(
        "StompListener",
        "heartbeatreceive",
        int,
        10000,
        "Interval at which the server asks clients for heart-beats (0: never)",
        unit="ms",
        minimum=0,
        maximum=3_600_000,
    ),
    Parameter(
        "StompListener",
        "heartbeatgrace",
        float,
        2.0,
        "A client silent for this many of its heart-beat intervals is disconnected",
        minimum=1.0,
        maximum=10.0,
    ),
    Parameter(
        "StompListener",
        "maxbodysize",
        int,
        10 * MIB,
        "Largest frame body accepted; a larger frame gets an ERROR",
        unit="bytes",
        minimum=0,
        maximum=1024 * MIB,
    ),
    Parameter(
        "StompListener",
        "maxheaders",
        int,
        1000,
        "Most headers one frame may carry",
        minimum=1,
        maximum=100_000,
    ),
    Parameter(
        "StompListener",
        "maxheaderlength",
        int,
        10 * KIB,
        "Longest header line (and command line) accepted",
        unit="bytes",
        minimum=64,
        maximum=MIB,
    ),
]

for _group in ("P2PPrioQueue", "PubSubPrioQueue"):
    PARAMETERS += [
        Parameter(
            _group,
            "maxnummessages",
            int,
            5000,
            "Messages the thread/buffer module holds before it hands its batch on at once",
            minimum=1,
            maximum=10_000_000,
        ),
        Parameter(
            _group,
            "maxnumbytes",
            int,
            262144,
            "Bytes the thread/buffer module holds before it hands its batch on at once",
            unit="bytes",
            minimum=1,
            maximum=1024 * MIB,
        ),
    ]

REGISTRY = Registry(PARAMETERS)
