"""What the two verdict lanes agree on (:class:`Plan`) and send each other: draft windows with their q,
verdicts, and the trace events that record each message."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import torch

from engines.core.trace import LaneMessage, StageSpan
from engines.lanes import Emit, Lane, Message, Send
from engines.programs.verdict.speculation_cache import Window

HIT, MISS = 1, 0


@dataclass
class Plan:
    """What both lanes must agree on for one run (it travels to the draft worker as JSON)."""

    method: str  # mirror | ssd
    window: int  # γ (mirror) or K (ssd)
    rule: str = "sample"  # sample | token_match (T's acceptance rule)
    # mirror
    kappa: int = 4
    exit_layer: int = 15
    # ssd
    fanout: str = "uniform"
    f: int = 3
    budget: int = 24
    c: float = 1.0
    saguaro_top: str = "f+1"
    backup: str = "jit"
    suffix_corpus: list = field(default_factory=list)  # backup=suffix: the earlier answers lane D may copy from
    a_p_prior: float = 0.5
    r_prior: float = 0.5
    detailed: bool = True
    positions: int = 0  # the context window: lane D drafts nothing past it (0: no limit)


def window_message(round_: int, window: Window, hit: bool, vocab: torch.Tensor) -> Message:
    """Draft tokens and their q, restricted to the draft vocabulary when all of q lies there (4–6× fewer bytes)."""
    blob = {"tokens": window.tokens, "logprobs": [round(x, 4) for x in window.logprobs], "q": "none"}
    probs = None
    if window.source == "lookup":
        blob["q"] = "point"
    elif window.probs is not None:
        outside = torch.ones(window.probs.shape[-1], dtype=torch.bool, device=window.probs.device)
        outside[vocab.to(outside.device)] = False
        if not bool(window.probs[:, outside].any()):  # every q lies in the draft vocabulary: send only that part
            blob["q"], probs = "draft", window.probs[:, vocab.to(outside.device)].float().reshape(-1)
        else:
            blob["q"], probs = "full", window.probs.float().reshape(-1)
    return Message("window", tick=round_, flag=HIT if hit else MISS, probs=probs, blob=blob)


def window_from(message: Message, vocab: torch.Tensor, vocab_size: int, device) -> Window:
    tokens = list(message.blob["tokens"])
    kind = message.blob["q"]
    probs = None
    if kind == "draft":
        probs = torch.zeros(len(tokens), vocab_size, dtype=torch.float32, device=device)
        probs[:, vocab.to(device)] = message.probs.view(len(tokens), -1).to(device)
    elif kind == "full":
        probs = message.probs.view(len(tokens), vocab_size).to(device)
    return Window(tokens, probs, list(message.blob["logprobs"]), "lookup" if kind == "point" else "draft")


def wire_bytes(message: Message) -> int:
    return message.nbytes() + (len(json.dumps(message.blob)) if message.blob else 0)


def send(lane: Lane, lanes: list[str], message: Message, what: str, round_: int):
    peer = 1 - lane.rank
    yield Send(peer, message)
    yield Emit(LaneMessage(t=lane.now(), lane=lanes[lane.rank], to_lane=lanes[peer], what=what, round=round_,
                           bytes=wire_bytes(message)))


def span(lane: Lane, stage: str, round_: int, start: float) -> StageSpan:
    end = lane.now()
    return StageSpan(t=end, lane=lane.name, stage=stage, round=round_, start=start, end=end)
