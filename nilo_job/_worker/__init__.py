"""The worker engine."""
