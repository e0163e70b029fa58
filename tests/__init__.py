"""nilo-job's test suite, in tiers: unit, stores, processes, cli, dashboard, integrations; what
they share is in `tests.helpers`."""
