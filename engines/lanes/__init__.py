"""Lanes: where the parallel methods run their work side by side (see ``docs/lanes.md``)."""

from .messages import Emit, LaneError, Message, Recv, Send
from .runtime import LaneGroup, LaneSpec, default_lanes, lane_capacity, pinned
from .serial import Lane, LaneClocks, MessageCost, run_serial

__all__ = ["Emit", "Lane", "LaneClocks", "LaneError", "LaneGroup", "LaneSpec", "Message", "MessageCost", "Recv",
           "Send", "default_lanes", "lane_capacity", "pinned", "run_serial"]
