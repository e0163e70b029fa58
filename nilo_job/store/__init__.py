"""Stores: where rows live. They store and answer; the queue above them decides.

`contract` is the Protocol every store satisfies; `memory`, `sqlite` (and, with the `postgres`
extra, `postgres`) are the stores that ship.
"""
