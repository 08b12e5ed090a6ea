"""Enqueue, acknowledge and order: what every PersQueueStore backend must do."""

from __future__ import annotations

from .store_fixtures import Stores, message, queued


class EnqueueAckTests:
    def test_append_returns_growing_positions_and_read_gives_them_back_in_order(
        self, stores: Stores
    ) -> None:
        queue = stores.queue()
        sent = [message(f"m{i}", body=f"body {i}".encode()) for i in range(5)]
        seqs = queue.append(sent)
        assert seqs == sorted(seqs) and len(set(seqs)) == 5
        batch = queue.read("/queue/a", now_ms=0)
        assert [seq for seq, _ in batch.messages] == seqs
        assert [m for _, m in batch.messages] == sent
        assert batch.at_end and batch.last_seq == seqs[-1]

    def test_one_batch_over_several_queues_keeps_each_queues_order(self, stores: Stores) -> None:
        queue = stores.queue()
        sent = [message(f"m{i}", destination=f"/queue/{'ab'[i % 2]}") for i in range(10)]
        queue.append(sent)
        for name in ("/queue/a", "/queue/b"):
            got = queued(queue, name)
            assert got == [m.message_id for m in sent if m.destination == name]
        assert queue.destinations() == ["/queue/a", "/queue/b"]

    def test_binary_bodies_and_unicode_headers_round_trip(self, stores: Stores) -> None:
        queue = stores.queue()
        sent = message("ü-1", body=bytes(range(256)) * 3, headers=(("näme", "wért:\n"), ("a", "")))
        queue.append([sent])
        assert queue.read("/queue/a", now_ms=0).messages[0][1] == sent

    def test_removed_messages_are_gone_and_others_stay_in_order(self, stores: Stores) -> None:
        queue = stores.queue()
        seqs = queue.append([message(f"m{i}") for i in range(6)])
        assert queue.remove("/queue/a", [seqs[0], seqs[2], seqs[5]]) == 3
        remaining = queued(queue)
        assert remaining == ["m1", "m3", "m4"]

    def test_removing_an_absent_position_is_ignored(self, stores: Stores) -> None:
        queue = stores.queue()
        (seq,) = queue.append([message("m0")])
        assert queue.remove("/queue/a", [seq]) == 1
        assert queue.remove("/queue/a", [seq, seq + 100]) == 0
        assert queue.remove("/queue/nowhere", [1]) == 0
        assert queue.count("/queue/a") == 0

    def test_remove_batch_spans_queues_in_one_call(self, stores: Stores) -> None:
        queue = stores.queue()
        a = queue.append([message("a0"), message("a1")])
        b = queue.append([message("b0", destination="/queue/b")])
        assert queue.remove_batch({"/queue/a": [a[1]], "/queue/b": b}) == 2
        assert queued(queue) == ["a0"]
        assert queue.read("/queue/b", now_ms=0).messages == []

    def test_read_pages_by_count_and_by_bytes(self, stores: Stores) -> None:
        queue = stores.queue()
        seqs = queue.append([message(f"m{i}", body=b"x" * 100) for i in range(10)])
        first = queue.read("/queue/a", now_ms=0, limit=4)
        assert [s for s, _ in first.messages] == seqs[:4] and not first.at_end
        second = queue.read("/queue/a", now_ms=0, after_seq=first.last_seq, max_bytes=250)
        assert [s for s, _ in second.messages] == seqs[4:6]
        rest = queue.read("/queue/a", now_ms=0, after_seq=second.last_seq, limit=100)
        assert [s for s, _ in rest.messages] == seqs[6:] and rest.at_end

    def test_a_message_bigger_than_max_bytes_still_comes_back_alone(self, stores: Stores) -> None:
        queue = stores.queue()
        queue.append([message("big", body=b"x" * 5000), message("small")])
        batch = queue.read("/queue/a", now_ms=0, max_bytes=100)
        assert [m.message_id for _, m in batch.messages] == ["big"] and not batch.at_end

    def test_reading_an_unknown_queue_is_empty(self, stores: Stores) -> None:
        batch = stores.queue().read("/queue/none", now_ms=0, after_seq=7)
        assert batch.messages == [] and batch.at_end and batch.last_seq == 7

    def test_a_batch_beyond_one_block_keeps_consecutive_positions_and_order(
        self, stores: Stores
    ) -> None:
        queue = stores.queue()
        sent = [message(f"m{i}", body=b"x" * 700) for i in range(150)]  # > 64 msgs, > 32 KiB
        seqs = queue.append(sent)
        assert seqs == list(range(seqs[0], seqs[0] + 150))
        got = queue.read("/queue/a", now_ms=0, limit=1000, max_bytes=10**9)
        assert [m for _, m in got.messages] == sent

    def test_removals_across_and_within_blocks_survive_a_restart(self, stores: Stores) -> None:
        queue = stores.queue()
        first = queue.append([message(f"a{i}") for i in range(5)])
        second = queue.append([message(f"b{i}") for i in range(5)])
        assert queue.remove("/queue/a", [*first, second[1], second[3]]) == 7
        stores.restart()
        queue = stores.queue()
        batch = queue.read("/queue/a", now_ms=0)
        assert [(s, m.message_id) for s, m in batch.messages] == [
            (second[0], "b0"),
            (second[2], "b2"),
            (second[4], "b4"),
        ]
        assert queue.remove("/queue/a", [second[1], second[2]]) == 1
        after = queue.read("/queue/a", now_ms=0, after_seq=second[0])
        assert [m.message_id for _, m in after.messages] == ["b4"]
        assert (queue.count("/queue/a"), queue.total_count()) == (2, 2)
