"""The operator tools: CLI, replay, load test, retention, outbox worker, admin page."""
