"""Pushes from forked children: what a pre-forking server's workers do with a queue its parent
built (and pushed through) before forking."""

import asyncio
import os
from collections.abc import Callable, Iterable

import nilo_job as job


def pushed_from_forks(
    queue: job.Jobs, value: Callable[[int], object], keys: Iterable[int]
) -> dict[int, int]:
    """Fork one child per key, each pushing `value(key)` at once when all are forked (within
    20 s); the id each child was given, mapped to its key. Every child must exit 0."""
    go_read, go_write = os.pipe()  # the children push at once, when the parent says go
    children: dict[int, int] = {}  # pid -> the read end of its pipe
    for key in keys:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: push once, say the id it was given
            os.close(read_end)
            code = 1
            try:
                os.read(go_read, 1)
                answer = asyncio.run(asyncio.wait_for(queue.push(value(key)), 20))
                os.write(write_end, f"{key} {answer}".encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        children[pid] = read_end
    os.write(go_write, b"g" * len(children))
    answers: dict[int, int] = {}
    for pid, read_end in children.items():
        _, status = os.waitpid(pid, 0)
        with os.fdopen(read_end) as said:
            text = said.read()
        assert os.WIFEXITED(status), text
        assert os.WEXITSTATUS(status) == 0, text
        key, row_id = text.split()
        answers[int(row_id)] = int(key)
    os.close(go_read)
    os.close(go_write)
    return answers
