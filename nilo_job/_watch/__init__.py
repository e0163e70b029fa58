"""How metrics and tracing see the queue: the observers it tells, and the trace context a row
carries from its push to its run."""
