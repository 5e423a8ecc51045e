"""Agreement per draft position (engines/training/agreement.py ``depth_agreement``): top-k and αᵢ by depth,
counted on chains; an EAGLE head's first position agrees with the one-position measure, and held-out records
are reported apart by who wrote their prompts."""

import pytest
import torch

from engines.training.agreement import _count, by_category, by_provenance, depth_agreement, topk_agreement
from engines.training.corpus import read_corpus
from engines.training.recipes import train_drafters
from engines.training.train import TrainConfig
from tests.conftest import trainer_setup


def test_alpha_is_the_share_right_where_every_earlier_draft_was_right():
    mask = torch.tensor([[False, True, True, True, True]])
    target = torch.tensor([[-1, 10, 11, 12, 13]])
    depth1 = torch.tensor([[-2, 10, 99, 12, 13]])[..., None]  # right at 1, 3, 4
    depth2 = torch.tensor([[-2, 10, 11, 99, 13]])[..., None]  # right at 1, 2, 4
    counts = {i: {"chains": 0, "alpha_seen": 0, "alpha_hit": 0, 1: 0} for i in (1, 2)}
    _count(counts, [depth1, depth2], target, mask, (1,))
    # chains start at 1..4; depth 1 drafts u, depth 2 drafts u+1 (chains 1, 2, 3 reach it)
    assert counts[1] == {"chains": 4, "alpha_seen": 4, "alpha_hit": 3, 1: 3}
    # depth 2: chain 1 → position 2 right; chain 2 → 3 wrong; chain 3 → 4 right; α counts chains right at depth 1
    # (1 and 3), both right at depth 2
    assert counts[2] == {"chains": 3, "alpha_seen": 2, "alpha_hit": 2, 1: 2}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trainer_setup(tmp_path_factory, "depth", prompts=16, answer_tokens=16)


def test_depth_agreement_of_an_eagle3_head_and_an_exit_head(trained, monkeypatch):
    engine, corpus, root = trained
    monkeypatch.setenv("SPECVIZ_DRAFTS", str(root / "drafts"))
    config = TrainConfig(epochs=5, batch_tokens=256, lr=3e-3)
    (eagle, card), = train_drafters("eagle3", engine.target, "tiny-test", corpus, config, draft_vocab_size=48,
                                    feature_layers=(1, 2, 3), ttt_depth=2, hass_top_k=4)
    assert card["hass_top_k"] == 4 and "HASS" in card["training"]["loss"]
    (exit_head, _), = train_drafters("exit", engine.target, "tiny-test", corpus, config, draft_vocab_size=48,
                                     exit_layers=(2,), head_kinds=("norm",))
    records = read_corpus(corpus)
    result = depth_agreement(engine.target, [eagle, exit_head], records, depth=4, ks=(1, 4))
    one = topk_agreement(engine.target, [eagle, exit_head], records, ks=(1, 4))
    for name in (eagle, exit_head):
        rows = result[name]
        assert list(rows) == [1, 2, 3, 4]
        assert rows[1]["top1"] == pytest.approx(one[name][1]) and rows[1]["top4"] == pytest.approx(one[name][4])
        assert rows[1]["alpha"] == rows[1]["top1"]  # nothing before the first draft
        assert all(rows[i]["top1"] <= rows[i]["top4"] for i in rows)
        assert [rows[i]["chains"] for i in rows] == sorted((rows[i]["chains"] for i in rows), reverse=True)
    with pytest.raises(ValueError, match="depth"):
        depth_agreement(engine.target, [eagle], records, depth=0)


def test_held_out_records_are_grouped_by_who_wrote_their_prompts():
    records = [{"id": "s-000001"}, {"id": "h-cc-1"}, {"id": "d-qa-1"}, {"id": "x", "written_by": "human"}]
    groups = by_provenance(records)
    assert list(groups) == ["human", "seed", "target"]
    assert [r["id"] for r in groups["human"]] == ["h-cc-1", "x"]


def test_evaluation_records_are_grouped_by_category_in_order():
    records = [{"id": 1, "category": "qa"}, {"id": 2, "category": "rag"}, {"id": 3, "category": "qa"}]
    groups = by_category(records)
    assert list(groups) == ["qa", "rag"] and [r["id"] for r in groups["qa"]] == [1, 3]


def test_cards_report_held_out_agreement_apart_by_who_wrote_the_prompts(trained, monkeypatch, tmp_path):
    import json

    engine, corpus, root = trained
    monkeypatch.setenv("SPECVIZ_DRAFTS", str(tmp_path / "drafts"))
    records = read_corpus(corpus)
    mixed = tmp_path / "mixed.jsonl"  # every other prompt "written by people", the rest by the target
    mixed.write_text("".join(json.dumps({**r, "id": f"{'h' if i % 2 else 's'}-{r['id']}"}) + "\n"
                             for i, r in enumerate(records)))
    from engines.training import data

    monkeypatch.setattr(data, "held_out", lambda record, fraction=0.05: int(record["id"][3:]) % 3 == 0)
    (name, card), = train_drafters("exit", engine.target, "tiny-test", mixed, TrainConfig(max_steps=3, batch_tokens=256),
                                   draft_vocab_size=48, exit_layers=(2,), head_kinds=("norm",))
    groups = card["heldout_agreement_by_provenance"]
    assert set(groups) == {"human", "target"} and set(card["data"]["train_records_by_provenance"]) == {"human", "target"}
    positions = sum(g["positions"] for g in groups.values())
    assert positions == card["data"]["heldout_positions_measured"]
    overall = sum(g["top1"] * g["positions"] for g in groups.values()) / positions
    assert overall == pytest.approx(card["heldout_top1_agreement"], abs=1e-3)
