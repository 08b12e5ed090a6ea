"""Flow control: watermarks, per-client egress priority queues and slow-subscriber measures."""
