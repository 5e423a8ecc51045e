"""The notebooks' guard (notebooks/conftest.py): the client's waits cut into short polls keep their contract —
a waiting message is read at once, and ``Empty`` comes when the whole timeout has passed, not a slice."""

import asyncio
import time
from pathlib import Path
from queue import Empty

import pytest
import zmq
import zmq.asyncio
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.session import Session

from tests.source_files import load_source

GUARD = Path(__file__).resolve().parents[1] / "notebooks" / "conftest.py"


def load_guard():
    return load_source("notebooks_poll_guard", GUARD)


def test_sliced_waits_read_a_message_at_once_and_time_out_whole():
    guard = load_guard()
    assert AsyncZMQSocketChannel.get_msg is guard.get_msg_in_slices
    assert load_guard().get_msg_in_slices.unsliced is guard.get_msg_in_slices.unsliced  # loading twice nests nothing

    async def scenario():
        context = zmq.asyncio.Context()
        reader, writer = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
        reader.bind("inproc://guard")
        writer.connect("inproc://guard")
        session = Session()
        channel = AsyncZMQSocketChannel(reader, session)
        try:
            timeout = 2.5 * guard.POLL_SLICE_S
            started = time.monotonic()
            with pytest.raises(Empty):
                await channel.get_msg(timeout=timeout)
            waited = time.monotonic() - started
            session.send(writer, "execute_reply", {"status": "ok"})
            started = time.monotonic()
            message = await channel.get_msg(timeout=60)
            return waited, time.monotonic() - started, message
        finally:
            reader.close(0)
            writer.close(0)
            context.term()

    waited, read_in, message = asyncio.run(scenario())
    assert waited >= 2.5 * guard.POLL_SLICE_S - 0.01  # the whole timeout, not one slice
    assert message["header"]["msg_type"] == "execute_reply" and message["content"] == {"status": "ok"}
    assert read_in < guard.POLL_SLICE_S  # already waiting: no slice to sit out
