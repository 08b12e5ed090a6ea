"""The ``wiremq`` command."""

from __future__ import annotations

import argparse
import gc
import getpass
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wiremq.analytics import cli as audits
from wiremq.config.groups import HaSettings, ServerSettings
from wiremq.config.parameters import REGISTRY
from wiremq.config.reference import effective_configuration, parameters_document
from wiremq.config.settings import Settings
from wiremq.config.tuning import CONFIG_FILE
from wiremq.config.wizard import MANUAL_EXAMPLE, WizardInputs, allocate, written_values
from wiremq.config.xmlconfig import (
    ConfigError,
    check_config,
    load_config,
    render_config,
    save_values,
)
from wiremq.modules.pipeline.catalog import check_chain
from wiremq.modules.security.users import ROLES, UsersFile, UsersFileError
from wiremq.server.version import installed_version

if TYPE_CHECKING:
    from wiremq.server.app import WiremqServer
    from wiremq.server.ha import HaNode

DESCRIPTION = """\
wiremq: a STOMP 1.0/1.1/1.2 message server with queues, topics and JMS
semantics, in the spirit of the iBus//MessageServer.

  wiremq --version                  the version installed
  wiremq serve                      serve on 127.0.0.1:61613 with the defaults
  wiremq serve --config config.xml  serve with your configuration
  wiremq default-config > config.xml
                                    write a config.xml with every parameter
  wiremq parameters                 list every parameter with its bounds
                                    (docs/parameters.md is its output)
  wiremq config check config.xml    check a config.xml, naming every problem
  wiremq config show [--config F]   the configuration in force, with defaults and units
  wiremq wizard --heap 512 ...      share the server's memory out (the manual's
                                    chapter 5) and write it to config.xml
  wiremq passwd NAME --role admin   add a user, or change one's password
                                    (read from standard input)
  wiremq grant --user NAME /queue/orders.> read write
                                    let a user (or --group) use destinations
  wiremq revoke --group NAME /topic/> [write]
                                    take permissions back
  wiremq users                      list users, groups and permissions
  wiremq export --data DIR          snapshot what the stores hold (server stopped)
  wiremq audit conservation --data DIR
                                    prove every message's fate (Spark)
  wiremq audit cleanup --data DIR   prove every cleanup removed only what expired
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wiremq", description=DESCRIPTION, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"wiremq {installed_version()}")
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
        "--admin-port",
        type=int,
        metavar="N",
        help="port of the admin console and JSON API (Admin.port, default 8161; 0: none)",
    )
    _add_overrides(serve)
    commands.add_parser("default-config", help="print a config.xml holding every default")
    commands.add_parser("parameters", help="print the parameter reference")
    config = commands.add_parser("config", help="check or show a configuration")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    check = config_commands.add_parser(
        "check",
        help="check a config.xml: every problem with its file, line, parameter and what is "
        "allowed (exit status 1 if any)",
    )
    check.add_argument("file", help="the config.xml to check")
    show = config_commands.add_parser(
        "show",
        help="print the configuration in force: every parameter with its unit, and its "
        "default where it differs",
    )
    show.add_argument("--config", metavar="FILE", help="config.xml to read (default: defaults)")
    show.add_argument("--data", metavar="DIR", help="data folder (Server.datadir)")
    _add_overrides(show)
    wizard = commands.add_parser(
        "wizard",
        help="share the server's memory out from a few facts (the manual's chapter 5) and "
        "write the result to config.xml",
        description=WIZARD_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for flag, name, text in WIZARD_FLAGS:
        example = getattr(MANUAL_EXAMPLE, name)
        wizard.add_argument(
            flag, dest=name, type=int, default=example, help=f"{text} (default {example})"
        )
    wizard.add_argument(
        "--output",
        metavar="FILE",
        default=CONFIG_FILE,
        help="config.xml to write; an existing one keeps its other settings and its "
        "previous version as FILE.bak (default: ./config.xml)",
    )
    wizard.add_argument(
        "--dry-run", action="store_true", help="print the allocation only, write nothing"
    )
    passwd = commands.add_parser(
        "passwd",
        help="add a user or change a user's password or role (the users file)",
        description=(
            "Add a user of the admin console and of STOMP logins, or change one's "
            "password (and role), in the users file of the data folder. The password is "
            "read from standard input (asked twice on a terminal). A running server "
            "sees the change at once."
        ),
    )
    passwd.add_argument("name", help="the user's name")
    passwd.add_argument("--role", choices=ROLES, help="admin, operator or viewer (new users)")
    passwd.add_argument("--delete", action="store_true", help="remove the user instead")
    passwd.add_argument(
        "--groups",
        metavar="G1,G2",
        help="the groups the user is in (their permissions add up; '' for none)",
    )
    _data_options(passwd)
    for command, verb in (("grant", "give"), ("revoke", "take back")):
        change = commands.add_parser(
            command,
            help=f"{verb} a user's or a group's permissions on destinations (the users file)",
            description=(
                f"{verb.capitalize()} permissions (read, write, create, admin) on the "
                "destinations a pattern matches: a name, * for one level of it, > last for "
                "the rest (/queue/orders.>), or > alone for every destination. The group "
                "'everyone' holds what every client holds, 'anonymous' what clients without "
                "a login hold. A running server sees the change at once."
            ),
        )
        who = change.add_mutually_exclusive_group(required=True)
        who.add_argument("--user", metavar="NAME")
        who.add_argument("--group", metavar="NAME")
        change.add_argument("pattern", help="destination pattern")
        change.add_argument(
            "permissions",
            nargs="+" if command == "grant" else "*",
            help="read, write, create, admin" + (" (none: all)" if command == "revoke" else ""),
        )
        _data_options(change)
    _data_options(commands.add_parser("users", help="list the users, groups and permissions"))
    audits.add_export(commands)
    audits.add_audit(commands)
    return parser


def _add_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="GROUP.NAME=VALUE",
        help="override any parameter, e.g. --set P2PPrioQueue.maxnummessages=100",
    )


WIZARD_HELP = """\
Share the server's memory out as the iBus manual's configuration wizard does
(chapter 5): from the memory the server may use, the numbers of topics and
queues, the largest messages, the message rate, the connections and the
threads, it sets the parameters that decide how memory is used, prints each
with the reason for its value, and writes them to config.xml. The defaults
are the manual's example, which gives the manual's table.
"""

WIZARD_FLAGS = (
    ("--heap", "heap_mb", "memory the server may use, in MB (the manual's -mx)"),
    ("--topics", "topics", "estimated number of topics"),
    ("--queues", "queues", "estimated number of queues"),
    ("--topic-message-size", "topic_message_bytes", "largest message on any topic, bytes"),
    ("--queue-message-size", "queue_message_bytes", "largest message on any queue, bytes"),
    ("--rate", "message_rate", "average message rate, messages per second"),
    ("--connections", "connections", "client connections, producers and consumers"),
    ("--threads", "threads", "the most threads the server process may have"),
)


def _data_options(command: argparse.ArgumentParser) -> None:
    """A users file command's ways to find the data folder."""
    command.add_argument("--data", metavar="DIR", help="data folder (Server.datadir)")
    command.add_argument("--config", metavar="FILE", help="config.xml naming the data folder")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "default-config":
        sys.stdout.write(render_config(Settings(REGISTRY)))
        return 0
    if args.command == "parameters":
        sys.stdout.write(parameters_document(REGISTRY))
        return 0
    if args.command in ("export", "audit"):
        return audits.main(args)
    if args.command in USERS_COMMANDS:
        return users_command(args)
    if args.command == "config":
        return config_check(args.file) if args.config_command == "check" else config_show(args)
    if args.command == "wizard":
        return wizard(args)
    return serve(args)


def _overrides(args: argparse.Namespace, flags: dict[str, str]) -> dict[str, str] | None:
    """``--set`` values and the flags that name parameters; None (and a message) if a
    ``--set`` is not GROUP.NAME=VALUE."""
    overrides: dict[str, str] = {}
    for item in args.set:
        key, equals, value = item.partition("=")
        if not equals:
            print(f"wiremq: --set {item!r}: expected GROUP.NAME=VALUE", file=sys.stderr)
            return None
        overrides[key] = value
    for flag, key in flags.items():
        if getattr(args, flag, None) is not None:
            overrides[key] = str(getattr(args, flag))
    return overrides


def config_check(path: str) -> int:
    """``wiremq config check FILE``: every problem, or a line saying it is fine."""
    problems = check_config(path)
    if not problems:
        try:
            config = load_config(path)
            for domain, specs in config.pipelines.items():
                check_chain(domain, specs)
        except ConfigError as error:
            problems = [error]
    for problem in problems:
        print(str(problem), file=sys.stderr)
    if problems:
        return 1
    from wiremq.server.descriptors import check_descriptors

    short = check_descriptors(config.settings)
    if short is not None:
        print(f"{path}: warning: {short}", file=sys.stderr)
    print(f"{path}: valid")
    return 0


def config_show(args: argparse.Namespace) -> int:
    """``wiremq config show``: the configuration ``serve`` would run with."""
    overrides = _overrides(args, {"data": "Server.datadir"})
    if overrides is None:
        return 2
    path = args.config or _data_config(overrides)
    try:
        config = load_config(path, overrides)
    except ConfigError as error:
        print(f"wiremq: configuration error: {error}", file=sys.stderr)
        return 2
    source = path or "defaults"
    if overrides:
        source += " and the command line"
    sys.stdout.write(effective_configuration(config.settings, config.pipelines, str(source)))
    return 0


def _data_config(overrides: dict[str, str]) -> str | None:
    """Without --config: config.xml in the data folder, if there is one (where the console
    saves its changes)."""
    default = ServerSettings.read(Settings(REGISTRY), "Server").datadir
    data = overrides.get("Server.datadir", default)
    path = Path(data) / CONFIG_FILE
    return str(path) if path.is_file() else None


def wizard(args: argparse.Namespace) -> int:
    """``wiremq wizard``: the allocation, printed with its reasons and written."""
    inputs = WizardInputs(**{name: getattr(args, name) for _, name, _ in WIZARD_FLAGS})
    problems = inputs.problems()
    if problems:
        for problem in problems:
            print(f"wiremq wizard: {problem}", file=sys.stderr)
        return 2
    allocations = allocate(inputs)
    values, missing = written_values(allocations, REGISTRY)
    width = max(len(a.key) for a in allocations)
    for allocation in allocations:
        mark = (
            "" if allocation not in missing else "  [not a parameter of this server: not written]"
        )
        print(f"{allocation.key:<{width}}  {allocation.value:>10}  {allocation.reason}{mark}")
    if args.dry_run:
        return 0
    try:
        save_values(args.output, values)
    except (OSError, ConfigError) as error:
        print(f"wiremq wizard: cannot write {args.output}: {error}", file=sys.stderr)
        return 1
    print(f"wrote {len(values)} values to {args.output}")
    return 0


def users_command(args: argparse.Namespace) -> int:
    """``wiremq passwd``, ``grant``, ``revoke``, ``users``: the users file of the data
    folder."""
    overrides = {"Server.datadir": args.data} if args.data is not None else {}
    try:
        config = load_config(args.config, overrides)
    except ConfigError as error:
        print(f"wiremq: configuration error: {error}", file=sys.stderr)
        return 2
    users = UsersFile(ServerSettings.read(config.settings, "Server").datadir)
    try:
        return USERS_COMMANDS[args.command](args, users)
    except (ValueError, UsersFileError) as error:
        print(f"wiremq: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"wiremq: {users.path}: {error.strerror}", file=sys.stderr)
        return 1


def passwd(args: argparse.Namespace, users: UsersFile) -> int:
    if args.delete:
        if not users.delete(args.name):
            print(f"wiremq: no user {args.name!r} in {users.path}", file=sys.stderr)
            return 1
        print(f"user {args.name!r} removed from {users.path}")
        return 0
    groups = args.groups.split(",") if args.groups is not None else None
    password = _read_password()
    added = users.set(args.name, password, args.role, groups)
    print(f"user {args.name!r} {'added to' if added else 'changed in'} {users.path}")
    return 0


def grant(args: argparse.Namespace, users: UsersFile) -> int:
    users.grant(args.user, args.group, args.pattern, args.permissions)
    print(f"{_who(args)} may {' '.join(args.permissions)} {args.pattern} ({users.path})")
    return 0


def revoke(args: argparse.Namespace, users: UsersFile) -> int:
    if not users.revoke(args.user, args.group, args.pattern, args.permissions or None):
        print(f"wiremq: {_who(args)} had none of that on {args.pattern}", file=sys.stderr)
        return 1
    print(f"{_who(args)}: permissions on {args.pattern} taken back ({users.path})")
    return 0


def _who(args: argparse.Namespace) -> str:
    return f"user {args.user!r}" if args.user is not None else f"group {args.group!r}"


def list_users(args: argparse.Namespace, users: UsersFile) -> int:
    directory = users.read()
    if not users.exists():
        print(f"no users file ({users.path}): every client may do everything")
        return 0
    for user in sorted(directory.users.values(), key=lambda u: u.name):
        groups = f" groups {','.join(user.groups)}" if user.groups else ""
        print(f"user {user.name} ({user.role}){groups}")
        for own in user.permissions:
            print(f"  {own.pattern}: {' '.join(own.permissions)}")
    for name, grants in sorted(directory.groups.items()):
        print(f"group {name}")
        for held in grants:
            print(f"  {held.pattern}: {' '.join(held.permissions)}")
    return 0


USERS_COMMANDS = {"passwd": passwd, "grant": grant, "revoke": revoke, "users": list_users}


def _read_password() -> str:
    """The password from standard input: asked twice on a terminal, else its first line."""
    if sys.stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise ValueError("the two passwords differ")
        return first
    return sys.stdin.readline().rstrip("\r\n")


def serve(args: argparse.Namespace) -> int:
    overrides = _overrides(
        args,
        {
            "host": "StompListener.host",
            "port": "StompListener.port",
            "data": "Server.datadir",
            "admin_port": "Admin.port",
        },
    )
    if overrides is None:
        return 2
    try:
        config = load_config(args.config or _data_config(overrides), overrides)
    except ConfigError as error:
        print(f"wiremq: configuration error: {error}", file=sys.stderr)
        return 2

    from twisted.internet import reactor
    from twisted.internet.error import CannotListenError

    from wiremq.admin.site import start_console
    from wiremq.modules.events import EVENTS
    from wiremq.server.app import WiremqServer
    from wiremq.server.ha import HaNode
    from wiremq.server.logging import configure_logging
    from wiremq.stores.errors import StoreError

    server_settings = ServerSettings.read(config.settings, "Server")
    configure_logging(server_settings.loglevel, server_settings.logformat)
    EVENTS.keep(server_settings.recentevents)
    ha: HaNode | None = None
    try:
        server = WiremqServer(config, reactor)
        if HaSettings.read(config.settings, "HA").enabled:
            ha = HaNode(server)
            ha.check()  # a store it cannot use is named now, not at the takeover
        start_console(server)  # first: nothing to undo if its port is taken
        if ha is not None:
            ha.start()  # a standby: it serves once it holds the lease
        else:
            server.start()
    except ConfigError as error:
        print(f"wiremq: configuration error: {error}", file=sys.stderr)
        return 2
    except StoreError as error:
        print(f"wiremq: cannot open the stores: {error}", file=sys.stderr)
        return 1
    except UsersFileError as error:
        print(f"wiremq: users file: {error}", file=sys.stderr)
        return 2
    except CannotListenError as error:
        print(f"wiremq: cannot listen: {error.socketError}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"wiremq: {error}", file=sys.stderr)
        return 1
    reactor.addSystemEventTrigger("before", "shutdown", _stopping(server, ha))  # type: ignore[attr-defined]
    collect_less()
    reactor.run()  # type: ignore[attr-defined]
    return 0


def _stopping(server: WiremqServer, ha: HaNode | None) -> Callable[[], object]:
    """How the server stops: in HA mode, the lease is given up once all is closed."""
    from twisted.internet import defer

    @defer.inlineCallbacks
    def stop() -> Any:
        if ha is not None:
            ha.stop_serving()
        yield server.stop()
        if ha is not None:
            ha.stop()

    return stop


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
