"""Speculative Speculative Decoding with SAGUARO sampling (paper 002; docs/mirror-and-ssd.md).

While the target verifies the window, the draft on its own lane runs the glue forward over it, takes
the top-F_k bonus candidates for every accepted length k (the speculated token left out), pre-speculates
K tokens after each and files them in the speculation cache. On the verdict (k, t*): hit → the cached
window at once; miss → the backup (``jit``: the draft decodes on the critical path; ``fast``: an n-gram
lookup; ``suffix``: the suffix index over the prompt, the answer and earlier answers of the engine's session,
:mod:`engines.drafters.suffix`; both model-free backups are verified as point masses). Round time (§5.6): T_v + T_comm + (1 − P(hit))·T_backup.

``draft``: ``tiny`` (the paper's setting: a small draft model, one token per forward), ``ss`` (an
extension: the speculative-streaming draft drafts 1 + 2 tokens per forward, so a rollout and a JIT backup
take ⌈K/3⌉ steps), or a causal LM with the target's tokenizer. (``eagle`` is not offered: its draft
reads the target's hidden states, which lane D does not have.)

``fanout``: ``uniform`` (f per k) or ``geometric`` (F_k ∝ P(A = k)^{1/(1+r)} within budget B, with a_p
and r measured from the run's own log). ``c`` < 1: SAGUARO sampling — each window token is drawn from
the draft distribution with its top-F tokens scaled by C (``saguaro_top`` f+1 includes the token's own
top-1, as the authors' code does), and verified against exactly that distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

from engines.drafters.registry import VERDICT
from engines.drafters.trained import drafters_for
from engines.methods.base import MethodConfig, require_int
from engines.methods.verdict import VerdictMethod, check_common
from engines.programs.verdict.wire import Plan

FANOUTS = ("uniform", "geometric")
BACKUPS = ("jit", "fast", "suffix")
SAGUARO_TOPS = ("f", "f+1")


@dataclass
class SsdConfig(MethodConfig):
    lookahead: int = 3  # K: draft work (glue + K tree steps) then fits under one verification here
    fanout: str = "uniform"
    f: int = 4
    budget: int = 16
    c: float = 1.0
    saguaro_top: str = "f+1"
    backup: str = "jit"
    draft: str = "tiny"
    mode: str = "lanes"

    def validate(self, n_layers: int) -> None:
        require_int("lookahead", self.lookahead, 1, 16)
        if self.fanout not in FANOUTS:
            raise ValueError(f"fanout must be one of {FANOUTS}, got {self.fanout!r}")
        require_int("f", self.f, 1, 64)
        require_int("budget", self.budget, 1, 256)
        if isinstance(self.c, bool) or not isinstance(self.c, (int, float)) or not 0 < self.c <= 1:
            raise ValueError(f"c (the SAGUARO down-weight) must be in (0, 1], got {self.c!r}")
        if self.saguaro_top not in SAGUARO_TOPS:
            raise ValueError(f"saguaro_top must be one of {SAGUARO_TOPS}, got {self.saguaro_top!r}")
        if self.backup not in BACKUPS:
            raise ValueError(f"backup must be one of {BACKUPS}, got {self.backup!r}")
        check_common(self, drafters_for(VERDICT))


class Ssd(VerdictMethod):
    name = "ssd"
    Config = SsdConfig
    description = "SSD: the draft pre-speculates for every likely verdict on its own lane (paper 002)"

    def plan(self, detailed: bool) -> Plan:
        c = self.config
        return Plan("ssd", c.lookahead, fanout=c.fanout, f=c.f, budget=c.budget, c=float(c.c),
                    saguaro_top=c.saguaro_top, backup=c.backup, detailed=detailed)

    def max_branches(self) -> int:
        c = self.config
        return c.budget if c.fanout == "geometric" else c.f * (c.lookahead + 1)
