"""Every drafter shipped in data/drafts loads on the real model, drafts losslessly and is actually trained:
its drafts are accepted more often than those of the untrained drafter of the same shape."""

import pytest

from engines.drafters.trained import available, read_card
from specviz.experiments.drafter_cards import EESD_HEADS, drafter_run_options

PROMPT = "Explain in a few sentences why the sky looks blue during the day."
NEW_TOKENS = 32
# `make test` checks the drafters the methods use by default (eesd, ppsd and mirror exit at 15; cats drafts
# at 3 and verifies at 15; eagle, moa's TLI 0, mirror's ss, ssd's tiny) and the bench's exit@8 rows; every
# other shipped drafter (~7 s each) is the same code with other weights, checked by `make test-all`
DEFAULT_RUN = {"exit@15-norm", "exit@15-layer", "cats@3", "cats@15", "eagle", "moa-tli0", "ss", "tiny", "exit@8-layer"}


def shipped() -> list:
    names = available() or ["(none shipped)"]
    return [name if name in DEFAULT_RUN or name == "(none shipped)" else pytest.param(name, marks=pytest.mark.slow)
            for name in names]


@pytest.fixture(scope="module")
def reference(real_engine):
    return real_engine.run(PROMPT, "ar", max_new_tokens=NEW_TOKENS)


@pytest.mark.parametrize("name", shipped())
def test_shipped_drafter_drafts_on_real_model(real_engine, reference, name):
    if name == "(none shipped)":
        pytest.fail("data/drafts holds no trained drafters")
    card = read_card(name)
    assert card["target"] == "SmolLM2-135M-Instruct" and card["training"]["loss_curve"]
    method, options = drafter_run_options(name)
    run = real_engine.run(PROMPT, method, max_new_tokens=NEW_TOKENS, **options)
    assert run.token_ids == reference.token_ids
    base_method, base_options = untrained_counterpart(name)
    untrained = real_engine.run(PROMPT, base_method, max_new_tokens=NEW_TOKENS, **base_options).stats
    assert run.stats.accepted > untrained.accepted, (
        f"{name}: α = {run.stats.acceptance_rate:.3f}, untrained α = {untrained.acceptance_rate:.3f}")


def untrained_counterpart(name: str) -> tuple[str, dict]:
    """An untrained drafter of about the same cost: the exit with the model's own head; for ``tiny`` its
    layers as an untrained self-draft (``ss`` too); for ``eagle`` (one decoder layer) a one-layer self-draft."""
    card = read_card(name)
    if card["kind"] in EESD_HEADS:
        return "eesd", {"exit_layer": card["exit_layer"], "head": "none", "gamma": 5}
    return "sps", {"draft": "self", "draft_layers": card.get("layers", 1), "gamma": 5}
