"""Every drafter shipped in data/drafts loads on the real model, drafts losslessly and is actually trained:
its drafts are accepted far more often than the untrained exit of the same shape (α ≈ 0.01–0.05)."""

import pytest

from engines.drafters.trained import available, read_card

PROMPT = "Explain in a few sentences why the sky looks blue during the day."
NEW_TOKENS = 40


def method_for(name: str) -> tuple[str, dict]:
    card = read_card(name)
    if card["kind"] in ("exit_norm", "exit_layer"):
        return "eesd", {"exit_layer": card["exit_layer"], "head": card["kind"].removeprefix("exit_"), "gamma": 5}
    return "sps", {"draft": name, "gamma": 5}


@pytest.fixture(scope="module")
def reference(real_engine):
    return real_engine.run(PROMPT, "ar", max_new_tokens=NEW_TOKENS)


@pytest.mark.parametrize("name", available() or ["(none shipped)"])
def test_shipped_drafter_drafts_on_real_model(real_engine, reference, name):
    if name == "(none shipped)":
        pytest.fail("data/drafts holds no trained drafters")
    card = read_card(name)
    assert card["target"] == "SmolLM2-135M-Instruct" and card["training"]["loss_curve"]
    method, options = method_for(name)
    run = real_engine.run(PROMPT, method, max_new_tokens=NEW_TOKENS, **options)
    assert run.token_ids == reference.token_ids
    assert run.stats.acceptance_rate > 0.15, f"{name}: α = {run.stats.acceptance_rate:.2f}"
