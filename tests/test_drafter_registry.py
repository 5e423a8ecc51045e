"""One registry of drafter kinds: every shipped card is a registered kind, and methods take their choices from it."""

from __future__ import annotations

import json

import pytest

from engines import Engine
from engines.drafters.registry import EXIT, KINDS, MOA, SPS, TREE, VERDICT, drafter_kind, drafter_kind_names
from engines.drafters.trained import available, drafters_for, read_card, shipped_kind
from engines.training.recipes import LOSSES


def test_every_shipped_drafter_is_a_registered_kind_with_a_use():
    for name in available():
        kind = drafter_kind(read_card(name)["kind"])
        assert kind.used_by and kind.loss
    assert set(LOSSES) == set(KINDS)


def test_an_unknown_kind_names_the_allowed_ones():
    with pytest.raises(ValueError, match="must be one of .*'eagle'"):
        drafter_kind("medusa")


def test_methods_draft_with_what_the_registry_allows():
    assert {"eagle", "eagle-matched", "ss", "tiny"} <= set(drafters_for(SPS))
    assert set(drafters_for(VERDICT)) == {n for n in available() if shipped_kind(n) in ("ss", "tiny")}
    assert "exit@8-norm" in drafters_for(TREE) and "exit@8-layer" not in drafters_for(TREE)
    assert all(shipped_kind(n) == "moa" for n in drafters_for(MOA))
    assert all(n.startswith(("exit@", "cats@")) for n in drafters_for(EXIT))
    assert drafter_kind_names(VERDICT) == ("tiny", "ss")
    assert shipped_kind("not-a-drafter") is None


def test_a_drafter_is_found_by_its_card_not_its_name(tmp_path, monkeypatch):
    """A second EAGLE head under any name drafts in sps and eagle; sps refuses a kind it cannot run."""
    import shutil

    from engines.drafters.trained import drafts_dir

    shutil.copytree(drafts_dir() / "eagle", tmp_path / "my-head")
    shutil.copytree(drafts_dir() / "moa-tli0", tmp_path / "moa-tli0")
    card = json.loads((tmp_path / "my-head" / "card.json").read_text())
    (tmp_path / "my-head" / "card.json").write_text(json.dumps({**card, "name": "my-head"}))
    monkeypatch.setenv("SPECVIZ_DRAFTS", str(tmp_path))
    assert drafters_for(SPS) == ["my-head"] and shipped_kind("my-head") == "eagle"
    engine = Engine.load(dtype="float32")
    result = engine.run("Name a colour.", "sps", draft="my-head", max_new_tokens=8)
    assert result.events[1].kind == "prefill" and len(result.token_ids) == 8
    with pytest.raises(ValueError, match="moa drafter, which sps cannot draft with"):
        engine.run("Name a colour.", "sps", draft="moa-tli0", max_new_tokens=4)
