"""The two messaging domains, and which one a destination name belongs to.

Point-to-point (``/queue/NAME``) and publish-subscribe (``/topic/NAME``): each has
its own pipeline, its own flow-control gates and its own store. The names are
config.xml's (``<pipeline domain="p2p">``). A leaf: pipelines, destinations and flow
control all speak of domains, and none of them is needed to name one.
"""

from __future__ import annotations

from wiremq.modules.errors import Refused
from wiremq.stores.api import QUEUE_PREFIX, TOPIC_PREFIX

P2P = "p2p"
PUBSUB = "pubsub"
DOMAINS = (P2P, PUBSUB)
PREFIXES = {P2P: QUEUE_PREFIX, PUBSUB: TOPIC_PREFIX}  # a domain's names begin with its own


def domain_of(name: str) -> str | None:
    """The domain a destination name belongs to: /queue/... p2p, /topic/... pubsub."""
    if name.startswith(QUEUE_PREFIX):
        return P2P
    if name.startswith(TOPIC_PREFIX):
        return PUBSUB
    return None


def require_domain(name: str) -> str:
    """The domain of a destination name a client uses (to send, to subscribe); a name of
    neither domain is refused, here and nowhere else."""
    domain = domain_of(name)
    if domain is None:
        raise Refused(
            "unknown destination", f"{name[:200]!r} is neither /queue/NAME nor /topic/NAME"
        )
    return domain
