"""Every sampling path hands the verifier the q each draft token was really drawn from — proved run by run.

The rules themselves are shown exact statistically in ``tests/test_verification_rules.py``. What a method
adds is plumbing: it draws draft tokens (from q, from a nucleus-warped q, from SAGUARO's σ, from a
lookahead stream's own q, in a branch rollout or a speculation cache) and hands each token with a q to a
rule. The rule is exact for whatever q it is given *if* that q is the one the token was drawn from. So
instead of 3,000 seeded runs per path, one sampled run per path records every draw the engine makes
(``Sampler.draw`` and ``Sampler.draw_by_cdf``: the token and the exact tensor it came from) and every
(token, q) the rule judges (``engines.core.acceptance.judge``, which every chain, tree and single token
goes through), and asserts each judged q
*is*, value for value, a distribution that token was drawn from. Point-mass proposals (lookups, top-k
picks, CATS corrections, SSD's n-gram backup) are judged with q = None; each path states whether its rules
judge drawn tokens, point masses or both, so a drawn token passed on as a point mass is caught too.

The harness's power is shown by the broken twins at the bottom: each routes a q other than the drawn one
(the nucleus cut undone, the main stream's q for a lookahead token, SAGUARO's σ reported as the plain q,
q dropped on the way) and must be caught. Lane modes run their drafts in worker processes, out of this
recorder's reach; they commit exactly what serial mode commits for the same seed, greedy and sampled
(``test_lanes.py``, ``test_verdict.py``), so serial mode's routing stands for them.

An end-to-end chi-square of a whole engine run was weighed and left out: sized from its broken twin
(the residual replaced by p) it needs ~2,800 runs of ~20 ms on a vocabulary-4 model, two minutes of a
15-minute suite, for what the rule tests and this routing check already prove.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

import engines.core.acceptance as acceptance
import engines.core.round as round_core
from engines import Engine
from engines.core.sampling import Sampler
from engines.drafters.trained import build_module, save_trained, set_vocab
from tests.conftest import tiny_llama

PROMPT = [1, 2, 3]
DRAFT_VOCAB = [0, 2, 3, 5, 6]  # the exit head and streaming draft never propose 1, 4 or 7
TOP_P = 0.8


@dataclass
class Routing:
    """What one run drew and what its rules judged."""

    draws: list[tuple[int, torch.Tensor]] = field(default_factory=list)
    judged: list[tuple[int, torch.Tensor | None, str]] = field(default_factory=list)  # token, q, which rule

    def drawn_from(self, token: int, q: torch.Tensor) -> bool:
        q = q.detach().float().cpu()
        return any(t == token and p.shape == q.shape and torch.equal(p, q) for t, p in self.draws)

    def check(self) -> tuple[int, int]:
        """Assert every judged token was drawn from the q it was judged against (or, for q = None, is not
        a drawn token the rule mistakes for a point mass); returns (drawn, point-mass) judged counts."""
        drawn = point = 0
        for token, q, rule in self.judged:
            if q is None:
                point += 1
                continue
            drawn += 1
            assert self.drawn_from(token, q), f"{rule} judged token {token} against a q it was not drawn from"
        return drawn, point


@pytest.fixture
def routing(monkeypatch) -> Routing:
    """Record draws and judgements for the duration of one test (in this process: serial modes)."""
    log = Routing()

    def recording(draw):
        def wrapper(self, probs):
            token = draw(self, probs)
            log.draws.append((token, probs.detach().float().cpu().clone()))
            return token
        return wrapper

    monkeypatch.setattr(Sampler, "draw", recording(Sampler.draw))
    monkeypatch.setattr(Sampler, "draw_by_cdf", recording(Sampler.draw_by_cdf))

    judge = acceptance.judge

    def recording_judge(drafted, target_logits, sampler, *args, **kwargs):
        if not sampler.greedy:
            for node in drafted.nodes:
                log.judged.append((node.token, node.q, "judge"))
        return judge(drafted, target_logits, sampler, *args, **kwargs)

    monkeypatch.setattr(acceptance, "judge", recording_judge)  # judge_chain and judge_token call it here
    monkeypatch.setattr(round_core, "judge", recording_judge)
    return log


def deep_target(layers: int = 2):
    """Its last layer really changes the output, so an early exit drafts from another distribution."""
    target = tiny_llama(vocab=8, layers=layers, seed=1, logit_scale=4.0)
    with torch.no_grad():
        target.model.layers[-1].mlp.down_proj.weight.mul_(8)
        target.model.layers[-1].self_attn.o_proj.weight.mul_(8)
    return target


def card_for(stack, name: str, kind: str, **fields) -> dict:
    return {"name": name, "kind": kind, "target_layers": stack.n_layers, "hidden_size": stack.config.hidden_size,
            "vocab_size": stack.config.vocab_size, "draft_vocab_size": len(DRAFT_VOCAB), **fields}


def save_every_drafter(engine: Engine) -> None:
    """Save, as shipped drafters under ``SPECVIZ_DRAFTS``, one of every trained kind the methods take for
    ``engine``'s target: an exit head at layer 1 restricted to ``DRAFT_VOCAB``, a speculative-streaming draft with
    two distinct lookahead streams, MoA drafters (TLI 0 and 1), and CATS adapters at layers 1 and 2."""
    from engines.drafters.moa_head import moa_name
    from tests.test_cats import with_random_adapters
    from tests.test_moa import random_moa

    stack, vocab = engine.target, torch.tensor(DRAFT_VOCAB)
    head_card = card_for(stack, "exit@1-norm", "exit_norm", exit_layer=1)
    head = build_module(head_card, stack)
    set_vocab(head, vocab)
    save_trained(head_card["name"], head, head_card)
    ss_card = card_for(stack, "ss", "ss", layers=1, stream_layers=1, streams=2, trained_layers=[0])
    streaming = build_module(ss_card, stack)
    set_vocab(streaming, vocab)
    with torch.no_grad():  # distinct lookahead streams, so stream tokens are drawn from their own q
        streaming.streams.copy_(torch.randn(streaming.streams.shape, generator=torch.Generator().manual_seed(5)))
    save_trained(ss_card["name"], streaming, ss_card)
    for tli in (0, 1):
        card = {"name": moa_name(tli), "kind": "moa", "tli": tli, "lsa": True, "target_layers": stack.n_layers,
                "hidden_size": stack.config.hidden_size, "vocab_size": stack.config.vocab_size,
                "draft_vocab_size": stack.config.vocab_size}
        save_trained(card["name"], random_moa(stack, tli, seed=tli), card)
    with_random_adapters(engine, (1, 2))


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """A deep vocabulary-8 target with every kind of drafter the methods take, saved as shipped ones: a
    separate draft model, an exit head at layer 1 restricted to ``DRAFT_VOCAB``, a speculative-streaming
    draft with two lookahead streams, MoA drafters (TLI 0 and 1) and CATS adapters at layers 1 and 2."""
    root = tmp_path_factory.mktemp("routing-drafts")
    patch = pytest.MonkeyPatch()
    patch.setenv("SPECVIZ_DRAFTS", str(root))
    engine = Engine(deep_target(layers=3))
    engine.add_draft("other", tiny_llama(vocab=8, layers=1, seed=2, logit_scale=4.0))
    save_every_drafter(engine)
    yield engine
    engine.close()
    patch.undo()


# method, options, and what its rules must judge: "drawn" (every q a drawn one), "point" (all point masses),
# "both" (drawn tokens and point masses in one run)
PATHS = [
    ("sps", {"draft": "other", "gamma": 3}, "drawn"),
    ("sps", {"draft": "other", "gamma": "auto"}, "drawn"),
    ("sps", {"draft": "other", "gamma": 3, "top_p": TOP_P}, "drawn"),
    ("sps", {"draft_layers": 1, "gamma": 2}, "drawn"),
    ("sps", {"draft": "ss", "gamma": 3}, "drawn"),  # the main token and both lookahead streams' tokens
    ("pld", {"gamma": 2}, "point"),
    ("pld", {"gamma": 2, "top_p": TOP_P}, "point"),
    ("eesd", {"exit_layer": 1, "gamma": 2}, "drawn"),
    ("eesd", {"exit_layer": 1, "gamma": 2, "top_p": TOP_P}, "drawn"),
    ("eesd", {"exit_layer": 1, "head": "norm", "gamma": 2}, "drawn"),  # q is zero outside the head's vocabulary
    ("eagle", {"draft": "other", "depth": 2, "topk": 2, "total_tokens": 4}, "point"),
    ("ppsd", {"exit_layer": 1, "head": "none", "mode": "serial"}, "drawn"),
    ("mirror", {"draft": "other", "exit_layer": 1, "kappa": 2, "gamma": 2, "mode": "serial"}, "drawn"),
    ("ssd", {"draft": "other", "lookahead": 2, "fanout": "geometric", "budget": 4, "c": 0.5, "mode": "serial"}, "drawn"),
    ("ssd", {"draft": "other", "lookahead": 2, "f": 1, "c": 0.5, "backup": "fast", "mode": "serial"}, "both"),  # fast backup: a lookup
    ("ssd", {"draft": "other", "lookahead": 2, "f": 2, "c": 0.2, "mode": "serial"}, "drawn"),
    ("moa", {"tli": 1, "depth": 2, "topk": 2, "total_tokens": 4}, "point"),
    ("moa", {"tli": 0, "tree": False, "gamma": 2}, "drawn"),
    ("moa", {"tli": 1, "depth": 2, "topk": 2, "total_tokens": 4, "network": "5g"}, "point"),
    ("cats", {"dm_layer": 1, "sv_layer": 2, "gamma": 3, "acceptance": "sample"}, "both"),
]


def routed(engine: Engine, log: Routing, method: str, options: dict, seeds=range(3)) -> tuple[int, int]:
    """Sampled runs of ``method``; the routing checked after each. Returns judged (drawn, point-mass) counts."""
    drawn = point = 0
    for seed in seeds:
        log.draws.clear()
        log.judged.clear()
        engine.run(PROMPT, method, max_new_tokens=16, temperature=1.0, seed=seed, instrument=False, **options)
        d, p = log.check()
        drawn, point = drawn + d, point + p
    return drawn, point


@pytest.mark.parametrize("method,options,expect", PATHS, ids=lambda v: v if isinstance(v, str) else None)
def test_each_draft_is_judged_against_the_q_it_was_drawn_from(engine, routing, method, options, expect):
    drawn, point = routed(engine, routing, method, options)
    assert drawn + point > 0, "the run judged no draft token: the check proved nothing"
    if expect == "drawn":
        assert point == 0, f"{point} drawn tokens were judged as point masses"
    elif expect == "point":
        assert drawn == 0, f"{drawn} deterministic picks were judged against a q"
    else:
        assert drawn and point, f"expected both drawn tokens and point masses, judged {drawn} and {point}"


# --- broken twins: the check must catch a q that is not the one drawn from -----------------------------------
def test_a_draft_judged_against_its_unwarped_q_is_caught(engine, routing, monkeypatch):
    """Sampling a draft token from the nucleus but reporting q before the top-p cut."""
    def draw_warped_report_plain(logits, sampler):
        q = sampler.probs(logits[None])[0]
        return sampler.draw(q), torch.softmax(logits / sampler.temperature, -1)

    for module in ("engines.drafters.early_exit", "engines.drafters.model_draft"):
        monkeypatch.setattr(f"{module}.sample_draft_token", draw_warped_report_plain)
    with pytest.raises(AssertionError, match="not drawn from"):
        routed(engine, routing, "eesd", {"exit_layer": 1, "gamma": 2, "top_p": TOP_P})


def test_stream_tokens_judged_against_the_main_streams_q_are_caught(engine, routing, monkeypatch):
    """Reporting, for every token of a window, the q of the window's first (main) token."""
    import engines.drafters.streaming as streaming

    window_q: list = []
    original = streaming.StreamingDrafter.propose

    def main_q_for_all(logits, sampler):
        q = sampler.probs(logits[None])[0]
        window_q.append(q)
        return sampler.draw(q), window_q[0]

    def propose(self, committed, gamma, sampler):
        window_q.clear()
        return original(self, committed, gamma, sampler)

    monkeypatch.setattr(streaming, "sample_draft_token", main_q_for_all)
    monkeypatch.setattr(streaming.StreamingDrafter, "propose", propose)
    with pytest.raises(AssertionError, match="not drawn from"):
        routed(engine, routing, "sps", {"draft": "ss", "gamma": 3})


def test_saguaro_judged_against_the_unshaped_q_is_caught(engine, routing, monkeypatch):
    """Drawing a window from σ_{F,C} but verifying it against the draft's plain q."""
    from engines.programs.verdict.branch_rollout import BranchDrafter

    def draw_shaped_report_plain(logits, depth, sampler, shape, branch):
        q = sampler.probs(logits[None])[0]
        shaped, _ = shape(depth, q)
        return sampler.draw_by_cdf(shaped), q

    monkeypatch.setattr(BranchDrafter, "_draw", staticmethod(draw_shaped_report_plain))
    with pytest.raises(AssertionError, match="not drawn from"):
        routed(engine, routing, "ssd", {"draft": "other", "lookahead": 2, "f": 2, "c": 0.2, "mode": "serial"})


def test_a_drawn_token_judged_as_a_point_mass_is_caught(engine, routing, monkeypatch):
    """Dropping q on the way to the rule (the token was drawn, the rule sees a lookup)."""
    import engines.programs.chain as chain_program

    monkeypatch.setattr(chain_program, "chain_tree", lambda tokens, probs, logprobs:
                        acceptance.chain_tree(tokens, None, logprobs))
    drawn, point = routed(engine, routing, "sps", {"draft": "other", "gamma": 3})
    assert point and not drawn  # the expectation "drawn" in PATHS is what catches it

