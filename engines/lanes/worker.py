"""A lane's worker process: join the driver's store, then serve its programs until told to shut down.

Started by :class:`~engines.lanes.runtime.LaneGroup` on this machine, or by hand on another one::

    python -m engines.lanes.worker --address DRIVER_HOST --port 29500 --rank 1 --world-size 2 --lane cpu0

Each request arrives as a ``configure`` message naming a program (``"module:function"``) and its
arguments; the program is a generator of :mod:`~engines.lanes.messages` operations, driven here with
blocking (but watched) receives. Events it emits ride to the driver on its next message.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import signal
import socket
import threading
import time

import torch
import torch.distributed as dist

from engines.lanes.channel import Channel
from engines.lanes.messages import Emit, LaneError, Message, Recv, Send
from engines.lanes.runtime import EXIT_DRIVER_LOST, can_pin, heartbeat, lane_core, make_group, require_lanes
from engines.lanes.serial import Lane

IDLE_FOREVER = 30 * 24 * 3600.0  # seconds


def _program(setup: dict):
    module, _, function = setup["program"].partition(":")
    return getattr(importlib.import_module(module), function)


def serve(address: str, port: int, rank: int, world: int, lane: str, parent: int | None = None) -> None:
    """``parent``: exit as soon as that process (the driver that spawned us) is gone, however it died.
    (Not ``PR_SET_PDEATHSIG``: it fires when the spawning *thread* ends — after every rerun of a Streamlit
    script.) On Windows ``os.getppid()`` keeps naming a dead parent, but the driver hosts the store, so the
    heartbeat's next call fails and the worker exits all the same."""
    require_lanes()  # a PyTorch without torch.distributed: say so, not an AttributeError
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle; it closes us
    core = lane_core(lane)  # a bad lane name fails here, before joining: the driver reports it while starting
    store = dist.TCPStore(address, port, is_master=False, timeout=datetime.timedelta(seconds=60))
    setup = json.loads(store.get("setup"))
    stop = threading.Event()
    heartbeat(address, port, rank, stop, min(0.2, setup["hang_seconds"] / 4), parent)
    store.set(f"ready/{rank}", str(os.getpid()))
    # a worker waits as long as the driver likes between requests: no transport timeout (a dead driver
    # closes the connection, which fails the wait at once; the heartbeat thread watches the parent too)
    group = make_group(store, rank, world, lane, IDLE_FOREVER)

    def driver_gone(error: Exception):  # the driver closed or died: nothing left to serve
        os._exit(EXIT_DRIVER_LOST)

    if core is not None:  # only the computing thread: message threads must not queue behind it
        if can_pin():  # Linux; elsewhere the lane is one torch thread the OS places (runtime.pinned)
            os.sched_setaffinity(0, {core})
        torch.set_num_threads(1)
    device = torch.device(lane if lane.startswith("cuda") else "cpu")
    channel = Channel(group, setup["hidden_size"], getattr(torch, setup["dtype"]), device, driver_gone,
                      [peer for peer in range(world) if peer != rank])
    this = Lane(rank, lane, time.perf_counter)
    host = socket.gethostname()
    while True:
        message = channel.recv(0)
        if message.kind == "shutdown":
            stop.set()  # the store may close before we exit: not a lost driver any more
            channel.flush()
            return
        if message.kind == "ping":
            channel.send(0, Message("ping", hidden=message.hidden, blob={"t": time.perf_counter(), "host": host}))
            continue
        if message.kind != "configure":
            raise LaneError(f"lane {lane} expected a configure message, got {message.kind!r}")
        program = _program(message.blob)(this, **message.blob.get("args", {}))
        run_program(program, channel, rank)


def run_program(program, channel: Channel, rank: int) -> None:
    outbox: list[dict] = []
    value = None
    with torch.inference_mode():
        while True:
            try:
                op = program.send(value)
            except StopIteration:
                channel.flush()
                return
            value = None
            if isinstance(op, Recv):
                value = channel.recv(op.src)
                outbox.extend(value.blob.pop("events", []))  # from lanes upstream: pass them on
            elif isinstance(op, Send):
                if outbox:
                    op.message.blob["events"], outbox = outbox, []
                channel.send(op.dst, op.message)
            elif isinstance(op, Emit):
                outbox.append({**op.event.to_dict(), "_rank": rank})


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m engines.lanes.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="the driver's host")
    parser.add_argument("--port", type=int, required=True, help="the driver's store port")
    parser.add_argument("--rank", type=int, required=True, help="this lane's rank (1 .. world-size − 1)")
    parser.add_argument("--world-size", type=int, required=True, help="lanes in all, the driver included")
    parser.add_argument("--lane", default="cpu0", help="cpuK (the K-th usable core of this host) or cuda:K")
    parser.add_argument("--die-with-parent", action="store_true", help="exit when the process that started us does")
    args = parser.parse_args(argv)
    serve(args.address, args.port, args.rank, args.world_size, args.lane,
          os.getppid() if args.die_with_parent else None)
    os._exit(0)  # every send is out; tearing gloo down with receives still posted could only abort


if __name__ == "__main__":
    main()
