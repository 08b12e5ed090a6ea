"""Destinations: queues, topics, their subscriptions, backlogs, expiry and dead letters."""
