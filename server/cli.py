"""The ``wiremq`` command."""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence

from wiremq.analytics import cli as audits
from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings
from wiremq.config.xmlconfig import ConfigError, load_config, render_config

DESCRIPTION = """\
wiremq: a STOMP 1.0/1.1/1.2 message server with queues, topics and JMS
semantics, in the spirit of the iBus//MessageServer.

  wiremq serve                      serve on 127.0.0.1:61613 with the defaults
  wiremq serve --config config.xml  serve with your configuration
  wiremq default-config > config.xml
                                    write a config.xml with every parameter
  wiremq parameters                 list every parameter with its bounds
  wiremq export --data DIR          snapshot what the stores hold (server stopped)
  wiremq audit conservation --data DIR
                                    prove every message's fate (Spark)
  wiremq audit cleanup --data DIR   prove every cleanup removed only what expired
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wiremq", description=DESCRIPTION, formatter_class=argparse.RawTextHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="run the server until Ctrl-C or SIGTERM",
        description="Run the message server until Ctrl-C or SIGTERM stops it cleanly.",
    )
    serve.add_argument("--config", metavar="FILE", help="config.xml to read (default: defaults)")
    serve.add_argument("--host", help="address to listen on (StompListener.host)")
    serve.add_argument("--port", type=int, help="STOMP port (StompListener.port; 0 = any free)")
    serve.add_argument("--data", metavar="DIR", help="data folder (Server.datadir)")
    serve.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="GROUP.NAME=VALUE",
        help="override any parameter, e.g. --set P2PPrioQueue.maxnummessages=100",
    )
    commands.add_parser("default-config", help="print a config.xml holding every default")
    commands.add_parser("parameters", help="print the parameter reference")
    audits.add_export(commands)
    audits.add_audit(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "default-config":
        sys.stdout.write(render_config(Settings(REGISTRY)))
        return 0
    if args.command == "parameters":
        sys.stdout.write(parameter_reference())
        return 0
    if args.command in ("export", "audit"):
        return audits.main(args)
    return serve(args)


def parameter_reference() -> str:
    """The parameter reference as a Markdown table, generated from the registry."""
    rows = [
        "| parameter | default | allowed | unit | run time | meaning |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for p in REGISTRY:
        live = "yes" if p.live else "no"
        rows.append(f"| {p.key} | {p.default} | {p.allowed()} | {p.unit} | {live} | {p.doc} |")
    return "\n".join(rows) + "\n"


def serve(args: argparse.Namespace) -> int:
    overrides: dict[str, str] = {}
    for item in args.set:
        key, equals, value = item.partition("=")
        if not equals:
            print(f"wiremq: --set {item!r}: expected GROUP.NAME=VALUE", file=sys.stderr)
            return 2
        overrides[key] = value
    for flag, key in (
        ("host", "StompListener.host"),
        ("port", "StompListener.port"),
        ("data", "Server.datadir"),
    ):
        if getattr(args, flag) is not None:
            overrides[key] = str(getattr(args, flag))
    try:
        config = load_config(args.config, overrides)
    except ConfigError as error:
        print(f"wiremq: configuration error: {error}", file=sys.stderr)
        return 2

    from twisted.internet import reactor
    from twisted.internet.error import CannotListenError

    from wiremq.config.groups import ServerSettings
    from wiremq.modules.events import EVENTS
    from wiremq.server.app import WiremqServer
    from wiremq.server.logging import configure_logging
    from wiremq.stores.errors import StoreError

    server_settings = ServerSettings.read(config.settings, "Server")
    configure_logging(server_settings.loglevel, server_settings.logformat)
    EVENTS.keep(server_settings.recentevents)
    try:
        server = WiremqServer(config, reactor)
        server.start()
    except ConfigError as error:
        print(f"wiremq: configuration error: {error}", file=sys.stderr)
        return 2
    except StoreError as error:
        print(f"wiremq: cannot open the stores: {error}", file=sys.stderr)
        return 1
    except CannotListenError as error:
        print(f"wiremq: cannot listen: {error.socketError}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"wiremq: {error}", file=sys.stderr)
        return 1
    reactor.addSystemEventTrigger("before", "shutdown", server.stop)  # type: ignore[attr-defined]
    collect_less()
    reactor.run()  # type: ignore[attr-defined]
    return 0


def collect_less() -> None:
    """Keep Python's cycle collector out of the message path.

    Messages are freed by reference counting; the collector only finds cycles,
    and the message path makes none. But each message allocates a few tracked
    objects (its frame, event, message and egress entry), and with the default
    thresholds the collector ran thousands of times a minute under load, each
    pass walking the young objects the queues hold: measured, ~5 % of the CPU
    of a queue stream at a threshold of 10,000 and ~8 % at 700. Objects from
    start-up are frozen out of its way, and it runs after 100,000 net
    allocations, which cuts it to nothing measurable while the garbage it may
    let wait stays small (cycles are rare: failures, closed connections).
    """
    gc.freeze()
    gc.set_threshold(100_000, 10, 10)


if __name__ == "__main__":
    sys.exit(main())
