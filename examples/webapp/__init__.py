"""The README's story made real: a FastAPI app whose background work is a nilo-job queue.

`jobs.py` holds the kinds and the services their runs ask for; `app.py` the routes. See
docs/web.md for how to run it and the decisions in it.
"""
