"""The admission module checks each message of a read, though it looks at a run of
messages from one sender to one destination once (its producers, its ``maxttl``): a run
refused as a whole is refused message by message, and the runs around it are admitted
with their own destination's settings."""

from __future__ import annotations

from tests.unit.net import Peer, send_frame


def test_every_message_of_a_refused_run_is_refused_and_the_runs_around_it_pass(make_net):
    net = make_net(
        destinations={"/queue/shut": {"shutdown": True}, "/queue/short": {"maxttl": 1000}}
    )
    consumer = Peer(net, "consumer")
    for number, name in enumerate(("/queue/shut", "/queue/short", "/queue/long")):
        consumer.subscribe(name, sub_id=str(number))
    producer = Peer(net, "producer")
    producer.feed(  # one read: five SENDs to three destinations, in four runs
        send_frame("/queue/short", "a")
        + send_frame("/queue/shut", "x", {"receipt": "r1"})
        + send_frame("/queue/shut", "y")
        + send_frame("/queue/long", "b")
        + send_frame("/queue/short", "c", {"expires": "0"})
    )
    # The first refusal is the client's ERROR (its session ends); the second is not
    # delivered either. What was read with them has been admitted.
    assert [(e.headers["receipt-id"], e.headers["message"]) for e in producer.errors] == [
        ("r1", "destination shut down")
    ]
    expiries = {m.body.decode(): m.headers.get("expires") for m in consumer.messages}
    now_ms = int(net.clock() * 1000)
    assert expiries == {  # /queue/short's maxttl, whichever run came before; none for long
        "a": str(now_ms + 1000),
        "b": None,
        "c": str(now_ms + 1000),
    }


def test_a_run_s_plain_messages_and_those_that_need_a_look_each_keep_their_places(make_net):
    """After the first message of a run, its plain messages are admitted in C; one with an
    ``expires`` or ``class-of-service`` header, or to another destination, gets its own
    look (an expired one is dropped, a maxttl caps the rest), and the run goes on."""
    net = make_net(destinations={"/queue/short": {"maxttl": 1000}})
    consumer = Peer(net, "consumer")
    for number, name in enumerate(("/queue/a", "/queue/b", "/queue/short")):
        consumer.subscribe(name, sub_id=str(number))
    now_ms = int(net.clock() * 1000)
    later = str(now_ms + 60_000)
    sent = [("/queue/a", "a1", {}), ("/queue/a", "a2", {}), ("/queue/a", "gone", {"expires": "1"})]
    sent += [("/queue/a", "a3", {"class-of-service": "1"}), ("/queue/a", "a4", {})]
    sent += [("/queue/a", "a5", {"expires": later}), ("/queue/b", "b1", {}), ("/queue/b", "b2", {})]
    sent += [("/queue/a", "a6", {}), ("/queue/short", "s1", {}), ("/queue/short", "s2", {})]
    sent += [("/queue/a", "a7", {})]
    Peer(net, "producer").feed(b"".join(send_frame(d, body, h) for d, body, h in sent))
    got: dict[str, list[tuple[str, str | None]]] = {}
    for message in consumer.messages:
        entry = (message.body.decode(), message.headers.get("expires"))
        got.setdefault(message.headers["destination"], []).append(entry)
    short = str(now_ms + 1000)
    assert got == {
        "/queue/a": [("a1", None), ("a2", None), ("a3", None), ("a4", None), ("a5", later)]
        + [("a6", None), ("a7", None)],
        "/queue/b": [("b1", None), ("b2", None)],
        "/queue/short": [("s1", short), ("s2", short)],
    }
