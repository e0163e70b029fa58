"""The queue's face: `Jobs` and the parts its methods hand their arguments to (push, the
operator's calls, the blocking bridge)."""
