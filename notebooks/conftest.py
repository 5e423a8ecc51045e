"""pytest's hook for the notebooks under nbmake: a guard against a wake-up the notebook client can miss.

nbclient waits for a cell's reply with one asyncio poll of the kernel's socket (``get_msg(timeout=cell
timeout)``). With pyzmq 27 that poll sometimes misses the socket's edge-triggered wake-up: the reply sits in
the socket, the kernel idles, and the poll returns only when its timer fires, then finds the reply and goes
on. Measured here (2-core AMD EPYC, ``notebooks/03_draft_trees.ipynb`` run 12 times in one process by
nbclient with its debug log, ``scripts/notebook_repeat.py --no-guard``): in 3 of 12 runs cell 9 (an
ipywidgets explorer) took exactly the 120 s cell timeout, and the log shows its last output and the kernel's
``idle`` at 6 s. The lost minutes are the
suite's: two in about every fourth ``make test``.

So every wait is cut into polls of at most ``POLL_SLICE_S``; a missed wake-up then costs that much, not the
whole timeout. A timeout still raises when its deadline passes, and a message is still read the moment its
poll sees it.

With ``SPECVIZ_KERNEL_TRANSPORT=ipc`` (set by ``scripts/run_suite.py`` when it runs notebooks side by side)
each kernel talks over Unix sockets, not TCP ports: kernels started at once can pick the same free port
(jupyter/jupyter_client#487).
"""

from __future__ import annotations

import os
import tempfile
import time
from queue import Empty

from jupyter_client.channels import AsyncZMQSocketChannel
from nbclient import NotebookClient

POLL_SLICE_S = 0.5
# the library's own method, also when this file is loaded twice in one process (the outputs script loads it)
_unsliced_get_msg = getattr(AsyncZMQSocketChannel.get_msg, "unsliced", AsyncZMQSocketChannel.get_msg)


async def get_msg_in_slices(self: AsyncZMQSocketChannel, timeout: float | None = None) -> dict:
    """``get_msg`` with the same contract (``Empty`` once ``timeout`` passes), polling in short slices."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        piece = POLL_SLICE_S if remaining is None else min(POLL_SLICE_S, remaining)
        try:
            return await _unsliced_get_msg(self, piece)
        except Empty:
            if remaining is not None and remaining <= POLL_SLICE_S:
                raise


get_msg_in_slices.unsliced = _unsliced_get_msg
AsyncZMQSocketChannel.get_msg = get_msg_in_slices


_create_kernel_manager = getattr(NotebookClient.create_kernel_manager, "on_tcp", NotebookClient.create_kernel_manager)


def create_kernel_manager_on_ipc(self: NotebookClient):
    """The library's kernel manager, told to use Unix sockets before it picks any address. Their paths are
    this process's own (by default every kernel counts up from ``kernel-ipc-1`` in its working folder, which
    two kernels starting at once would share), in the temporary folder, which the kernel removes on exit."""
    manager = _create_kernel_manager(self)
    manager.transport = "ipc"
    manager.ip = os.path.join(tempfile.gettempdir(), f"specviz-kernel-{os.getpid()}-{id(manager):x}")
    return manager


create_kernel_manager_on_ipc.on_tcp = _create_kernel_manager
if os.environ.get("SPECVIZ_KERNEL_TRANSPORT") == "ipc" and os.name != "nt":
    NotebookClient.create_kernel_manager = create_kernel_manager_on_ipc
