"""A bound on the bytes held in unfinished frames over all connections.

A frame is decoded once it is complete, so each connection holds the bytes of
the frame it has not finished, up to ``maxbodysize``: many connections doing
so at once would hold that many times over. Past
``StompListener.maxunfinishedbytes`` in all, a connection that holds more than
its share is not read; but one, the finisher, is always read: the one holding
the most when the bound was passed, until it finishes its frame and frees what
it held; then the one holding the most then takes its place. One at a time, so
that connections growing side by side cannot each take the role in turn.

A connection's share is what the bound leaves once the stopped connections
and the finisher are counted, split among the others still read; but never
less than its floor, the bound over ``maxconnections``, so that connections
sending small frames go on. (A share of the bound over the connections holding
any, the first rule, let connections that started a frame after the bound was
passed each take the larger share of fewer holders.) The total stays within
the bound plus one frame plus one read and one floor per connection (at most
twice the bound plus one frame plus the reads), and frames keep finishing.
Once the total is under the bound again, every connection stopped for it is
read again.
"""

from __future__ import annotations

from wiremq.modules.flow.watermarks import Producer


class UnfinishedFrames:
    """What every connection holds of a frame not yet complete, and who is stopped for it."""

    def __init__(self, limit: int, max_connections: int) -> None:
        self.limit = limit
        self.floor = limit // max_connections  # the share no connection goes below
        self.total = 0
        self.peak = 0  # the highest total so far, for the admin view
        self._held: dict[Producer, int] = {}  # connections holding any, and how much
        self._stopped: set[Producer] = set()
        self._finisher: Producer | None = None  # read whatever it holds

    def held(self, client: Producer, nbytes: int) -> None:
        """After a read: ``client`` holds ``nbytes`` of a frame it has not finished."""
        before = self._held.get(client, 0)
        if nbytes == before:
            return
        if nbytes:
            self._held[client] = nbytes
        else:
            del self._held[client]
            if client is self._finisher:
                self._finisher = None
        self.total += nbytes - before
        if self.total > self.peak:
            self.peak = self.total
        if self.total > self.limit:
            self._over(client)
        elif self._stopped:
            self._finisher = None
            stopped, self._stopped = self._stopped, set()
            for other in stopped:
                other.start_reading(self)

    def _over(self, client: Producer) -> None:
        """Stop ``client`` if it holds more than its share and is not the finisher."""
        held = self._held
        finisher = self._finisher
        if finisher is None:
            finisher = self._finisher = max(held, key=held.__getitem__)
            if finisher in self._stopped:
                self._stopped.discard(finisher)
                finisher.start_reading(self)
        if client is finisher or client in self._stopped or client not in held:
            return
        stopped = self._stopped
        taken = held[finisher] + sum(held.get(other, 0) for other in stopped)
        read = len(held) - len(stopped) - 1  # those read besides the finisher, client too
        share = max(self.limit - taken, 0) // read
        if held[client] > max(share, self.floor):
            stopped.add(client)
            client.stop_reading(self)

    def forget(self, client: Producer) -> None:
        """A connection went away: what it held is freed."""
        self._stopped.discard(client)
        self.held(client, 0)

    def __str__(self) -> str:
        return "unfinished frames"
