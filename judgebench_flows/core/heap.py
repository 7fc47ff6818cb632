"""The process's start-up objects kept out of the cyclic garbage collector's walks.

A process that runs our flows holds a few hundred thousand objects from its imports alone (Prefect,
pydantic's schemas, SQLAlchemy, openai's types, numpy) that live until it exits. CPython's full
collections walk every one of them, with the event loop stopped, and at exit the interpreter's final
collections walk them again: a night's process took about as long to exit as Prefect takes to start
its flow run (docs/performance.md, "The process's heap and a batch's first round"). `gc.freeze` moves
the objects alive now to a generation no collection visits; done once, when the first flow starts
(imports finished, nothing judged yet), and again at exit, so finalization frees by reference count
without walking the heap.

The cost: cyclic garbage alive at those two moments is never collected, only reclaimed when the process
ends. At the first flow's start that is what the imports left (small); at exit nothing is kept anyway.
Python already promises no `__del__` for objects alive at exit, and nothing this package keeps waits
for one: results and journals are fsync'd as written, database rows committed, logs flushed by
`logging`'s own exit hook.
"""

from __future__ import annotations

import atexit
import functools
import gc


@functools.cache
def settle_heap() -> None:
    """Once per process: freeze what is alive now, and again at exit."""
    gc.freeze()
    atexit.register(gc.freeze)
