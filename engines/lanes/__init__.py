"""Lanes: where the parallel methods run their work side by side (see ``docs/lanes.md``)."""

from engines.lanes.messages import Emit, LaneError, LanesUnavailable, Message, Recv, Send
from engines.lanes.runtime import (
    LaneGroup,
    LaneSpec,
    can_pin,
    default_lanes,
    kill_process_tree,
    lane_capacity,
    lanes_unavailable,
    pinned,
)
from engines.lanes.serial import Lane, LaneClocks, MessageCost, run_serial

__all__ = [
    "Emit", "Lane", "LaneClocks", "LaneError", "LaneGroup", "LaneSpec", "LanesUnavailable", "Message", "MessageCost",
    "Recv", "Send", "can_pin", "default_lanes", "kill_process_tree", "lane_capacity", "lanes_unavailable", "pinned",
    "run_serial",
]
