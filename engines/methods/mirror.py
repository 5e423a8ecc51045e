"""Mirror Speculative Decoding (paper 000; docs/mirror-and-ssd.md): the target's early exit launches the draft.

Each round the target runs its window through layers 1..l_e, sends the top-κ of its early-exit proxy
at every one of the γ+1 positions to the draft's lane, and finishes layers l_e+1..N while the draft rolls
out a window for every (position, candidate) root. After the verdict (A, c) the next window is the
branch rooted at c after A accepted tokens (a root or depth *hit*), or a fresh rollout on the critical
path (*fallback*). Step time (Eq. 10): T^{1:l_e} + T_rv + max(T^{l_e+1:N}, T_draft^gen).

``exit_head``: ``model`` — the model's own final norm and LM head on h^(l_e), as the paper does;
``norm`` — the shipped exit head trained at l_e (a deviation: a better proxy raises the overlap mass Ω_κ).
``rule``: ``sample`` — min(1, p/q) (default); ``token_match`` — the paper's Eq. 3/11.
"""

from __future__ import annotations

from dataclasses import dataclass

from engines.drafters.registry import VERDICT
from engines.drafters.trained import available, drafters_for, exit_head_name
from engines.methods.base import MethodConfig, require_int
from engines.methods.verdict import RULES, VerdictMethod, check_common
from engines.programs.verdict.wire import Plan

EXIT_HEADS = ("model", "norm")


@dataclass
class MirrorConfig(MethodConfig):
    gamma: int = 3  # one speculative-streaming step (1 + 2 streams) drafts the whole window
    kappa: int = 4
    exit_layer: int = 15
    exit_head: str = "model"
    draft: str = "ss"
    rule: str = "sample"
    mode: str = "lanes"

    def validate(self, n_layers: int) -> None:
        require_int("gamma", self.gamma, 1, 16)
        require_int("kappa", self.kappa, 1, 16)
        require_int("exit_layer", self.exit_layer, 1, n_layers - 1)
        if self.exit_head not in EXIT_HEADS:
            raise ValueError(f"exit_head must be one of {EXIT_HEADS} (model = the model's own norm and LM head, as "
                             f"in the paper; norm = the shipped exit head at exit_layer), got {self.exit_head!r}")
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {self.rule!r}")
        check_common(self, drafters_for(VERDICT))


class Mirror(VerdictMethod):
    name = "mirror"
    Config = MirrorConfig
    description = "Mirror-SD: the target's early exit launches the draft on its own lane (paper 000)"

    def plan(self, detailed: bool) -> Plan:
        c = self.config
        return Plan("mirror", c.gamma, c.rule, kappa=c.kappa, exit_layer=c.exit_layer, detailed=detailed)

    def max_branches(self) -> int:
        return (self.config.gamma + 1) * self.config.kappa

    def exit_head(self):
        if self.config.exit_head == "model":
            return None
        name = exit_head_name(self.config.exit_layer, "norm")
        if name not in available():
            shipped = sorted(n for n in available() if n.endswith("-norm"))
            raise ValueError(f"no norm exit head at exit_layer={self.config.exit_layer}; shipped: {', '.join(shipped)}")
        return self.engine.trained_drafter(name)
