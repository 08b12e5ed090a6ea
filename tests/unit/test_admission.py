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
