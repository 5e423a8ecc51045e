"""Notebook 02's drawing of one EAGLE forward shows what the engine's EAGLE drafter computes, not a diagram."""

from __future__ import annotations

import pytest

from engines.core.trace import DraftTree
from specviz.experiments.drafter_forward import eagle_forward
from specviz.views.drafter_forward import drafter_forward_figure

PROMPT = "Write a short poem about the sea."


def test_the_drawn_forward_drafts_what_the_engines_eagle_drafter_drafts(real_engine):
    run = real_engine.run(PROMPT, "sps", draft="eagle", gamma=3, max_new_tokens=6)
    first_round = next(e for e in run.events if isinstance(e, DraftTree))
    ar = real_engine.run(PROMPT, "ar", max_new_tokens=6)
    context = real_engine.encode(PROMPT) + ar.token_ids[:1]  # what round 0 drafts after: the prompt and the prefill's token
    forward = eagle_forward(real_engine, context, ar.token_ids[1:], steps=3, k=5)
    assert [step.candidates[0][0] for step in forward.steps] == [node["token"] for node in first_round.nodes]
    for step in forward.steps:
        probs = [p for _, _, p in step.candidates]
        assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
        in_top = [token for token, _, _ in step.candidates].index(step.target_token) + 1 \
            if step.target_token in [token for token, _, _ in step.candidates] else None
        assert in_top is None or step.target_rank == in_top
        assert -1 <= step.feature_cosine <= 1
    assert forward.steps[0].on_target_path
    assert len(forward.read_feature) == len(forward.predicted) == real_engine.target.config.hidden_size
    assert forward.draft_vocab < forward.vocab

    figure = drafter_forward_figure(forward)
    bars = [trace for trace in figure.data if trace.type == "bar"]
    assert len(bars) == 3 and figure.data[0].type == "heatmap"
    for bar, step in zip(bars, forward.steps):
        green = [colour == "#2e7d32" for colour in bar.marker.color]
        assert green == [token == step.target_token for token, _, _ in step.candidates]


def test_eagle_forward_rejects_what_it_cannot_draw(real_engine):
    ids = real_engine.encode(PROMPT)
    with pytest.raises(ValueError, match="following tokens"):
        eagle_forward(real_engine, ids, [1], steps=3)
    with pytest.raises(ValueError, match="EAGLE head"):
        eagle_forward(real_engine, ids, [1, 2, 3], drafter="exit@8-layer")
