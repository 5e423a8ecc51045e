"""Each trainer's loop runs and its loss falls (tiny random target); saved drafters load and draft;
model cards that disagree with their weights are refused."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from engines.drafters.trained import load_trained
from engines.training.agreement import topk_agreement
from engines.training.corpus import read_corpus
from engines.training.data import vocabulary_coverage
from engines.training.recipes import heldout_sample, train_drafters
from engines.training.train import TrainConfig
from specviz.experiments.drafter_compare import compare_drafters, head_escape_rates
from specviz.views.drafter_compare import tau_vs_acceptance_figure
from tests.conftest import trainer_setup


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny target that answers 60 random prompts greedily: a miniature distillation corpus."""
    return trainer_setup(tmp_path_factory, "drafts", prompts=60, answer_tokens=24)


def _train(setup, monkeypatch, kind, draft_vocab_size=48, **options):
    engine, corpus, root = setup
    monkeypatch.setenv("SPECVIZ_DRAFTS", str(root))
    config = TrainConfig(epochs=30, batch_tokens=256, lr=3e-3)
    return train_drafters(kind, engine.target, "tiny-test", corpus, config, draft_vocab_size=draft_vocab_size,
                          **options)


def _falls(card, ratio=0.7):
    curve = [loss for _, loss in card["training"]["loss_curve"]]
    first, last = sum(curve[:5]) / 5, sum(curve[-5:]) / 5
    return last < ratio * first, (first, last)


def test_exit_heads_train_and_draft(setup, monkeypatch):
    saved = _train(setup, monkeypatch, "exit", exit_layers=(1, 2), head_kinds=("norm", "layer"))
    assert [name for name, _ in saved] == ["exit@1-norm", "exit@1-layer", "exit@2-norm", "exit@2-layer"]
    engine = setup[0]
    reference = engine.run([5, 6, 7], "ar", max_new_tokens=20)
    for name, card in saved:
        ok, values = _falls(card)
        assert ok, f"{name} loss did not fall: {values}"
        assert card["draft_vocab_size"] <= 48 and card["trained_parameters"] > 0
        head = card["kind"].removeprefix("exit_")
        run = engine.run([5, 6, 7], "eesd", max_new_tokens=20, exit_layer=card["exit_layer"], head=head, gamma=3)
        assert run.token_ids == reference.token_ids  # trained heads stay lossless
        assert run.events[0].config["head"] == head

    # Greedy answers in fp32: the target's own next token is the next answer token, so with k = the whole
    # draft vocabulary the top-k agreement must equal the share of answer tokens inside that vocabulary.
    records = read_corpus(setup[1])
    size = saved[0][1]["draft_vocab_size"]
    result = topk_agreement(engine.target, [name for name, _ in saved], records, ks=(1, 2, size))
    vocab = engine.trained_drafter(saved[0][0]).head.vocab_ids
    for name, row in result.items():
        assert row[1] <= row[2] <= row[size], (name, row)
        assert row[size] == pytest.approx(vocabulary_coverage(records, vocab))
    assert max(row[1] for row in result.values()) > 0.2


def test_agreement_measures_drafters_of_different_vocabularies_together(setup, monkeypatch):
    """Drafters from different corpora read out through different draft vocabularies: measured together,
    each gets what it gets alone."""
    (narrow, _), = _train(setup, monkeypatch, "exit", draft_vocab_size=40, exit_layers=(3,), head_kinds=("norm",))
    (wide, _), = _train(setup, monkeypatch, "cats", dm_layer=None, sv_layer=(2,))
    engine, corpus, _ = setup
    records = read_corpus(corpus)
    together = topk_agreement(engine.target, [narrow, wide], records, ks=(1, 4))
    assert list(together) == [narrow, wide]
    for name in (narrow, wide):
        assert together[name] == topk_agreement(engine.target, [name], records, ks=(1, 4))[name]


def test_eagle_trains_and_drafts(setup, monkeypatch):
    (name, card), = _train(setup, monkeypatch, "eagle")
    ok, values = _falls(card)
    assert ok, values
    engine = setup[0]
    reference = engine.run([9, 8, 7], "ar", max_new_tokens=20)
    run = engine.run([9, 8, 7], "sps", max_new_tokens=20, draft="eagle", gamma=4)
    assert run.token_ids == reference.token_ids
    assert run.stats.acceptance_rate > 0.2  # the head learned something about this target


def test_tiny_trains_and_drafts(setup, monkeypatch):
    (name, card), = _train(setup, monkeypatch, "tiny", tiny_layers=2, tiny_trained=1)
    ok, values = _falls(card)
    assert ok, values
    assert card["trained_layers"] == [1] and card["frozen_layers_from_target"] == [0]
    engine = setup[0]
    reference = engine.run([1, 2, 3], "ar", max_new_tokens=20)
    for full_vocab in (False, True):
        run = engine.run([1, 2, 3], "sps", max_new_tokens=20, draft="tiny", gamma=3, full_vocab=full_vocab)
        assert run.token_ids == reference.token_ids
    tiny = engine.trained_drafter("tiny")
    logits = tiny(torch.tensor([[1, 2, 3, 4]])).logits[0]
    outside = ~torch.isin(torch.arange(logits.shape[-1]), tiny.draft_vocab)
    assert outside.any() and (logits[:, outside] == 0).all()  # its full head cannot wander off its vocabulary
    assert tiny.lm_head.weight.data_ptr() != tiny.get_input_embeddings().weight.data_ptr()
    assert head_escape_rates(tiny, [1, 2, 3, 4, 5, 6])["own"] == 0.0

    compared = compare_drafters(engine, [1, 2, 3], ["tiny"], max_new_tokens=20)
    row, events = compared["rows"][0], compared["runs"]["tiny"]
    assert list(compared["runs"]) == ["ar", "tiny"] and events[0].method == "sps"
    alone = engine.run([1, 2, 3], "sps", max_new_tokens=20, draft="tiny", gamma=5).stats  # greedy: the same run
    assert row["τ"] == pytest.approx(alone.mean_accepted_length)
    assert row["first-guess acceptance"] == alone.acceptance_by_position[0] and row["same text as ar"]
    figure = tau_vs_acceptance_figure(compared["rows"], gamma=3)
    assert list(figure.data[1].y) == [row["τ"]] and figure.data[0].y[0] == 1.0


def test_card_that_disagrees_with_weights_is_refused(setup, monkeypatch):
    engine, _, root = setup
    _train(setup, monkeypatch, "exit", exit_layers=(1,), head_kinds=("norm",))
    folder = root / "exit@1-norm"
    card = json.loads((folder / "card.json").read_text())
    engine._trained.clear()

    def refused(edit_card=None, edit_weights=None, match=""):
        good_card, good_weights = (folder / "card.json").read_text(), load_file(str(folder / "model.safetensors"))
        try:
            if edit_card:
                (folder / "card.json").write_text(json.dumps({**card, **edit_card}))
            if edit_weights:
                save_file(edit_weights(dict(good_weights)), str(folder / "model.safetensors"))
            with pytest.raises(ValueError, match=match):
                load_trained("exit@1-norm", engine.target)
        finally:
            (folder / "card.json").write_text(good_card)
            save_file(good_weights, str(folder / "model.safetensors"))

    refused(edit_card={"vocab_size": 49152}, match="vocab_size")
    refused(edit_card={"hidden_size": 64}, match="hidden_size")
    refused(edit_card={"draft_vocab_size": 7}, match="draft vocabulary")
    odd_shape = lambda w: {**w, "proj.weight": torch.zeros(3, 3, dtype=torch.float16)}  # noqa: E731
    refused(edit_weights=odd_shape, match="not the file its card describes")  # the card's size and sha256
    before = {"weights": None}  # a card written before it recorded its weights: their shapes decide
    refused(edit_card=before, edit_weights=odd_shape, match="proj.weight")
    refused(edit_card=before, edit_weights=lambda w: {k: v for k, v in w.items() if k != "norm.weight"}, match="missing")
    load_trained("exit@1-norm", engine.target)  # the untouched files still load


def test_streaming_draft_trains_and_drafts(setup, monkeypatch):
    # a lighter stream loss than the default 0.5^j: this 32-wide model has little room to share
    (name, card), = _train(setup, monkeypatch, "ss", tiny_layers=3, tiny_trained=2, streams=2, stream_weight=0.2)
    ok, values = _falls(card)
    assert ok, values
    assert card["stream_layers"] == 2 and card["trained_layers"] == [1, 2] and card["streams"] == 2
    engine = setup[0]
    reference = engine.run([4, 5, 6], "ar", max_new_tokens=20)
    run = engine.run([4, 5, 6], "sps", max_new_tokens=20, draft="ss", gamma=5)
    assert run.token_ids == reference.token_ids
    assert run.stats.acceptance_rate > 0.2
    assert len(run.stats.acceptance_by_position) >= 3  # stream tokens (positions 2, 3) were accepted too


def test_streaming_draft_cached_steps_match_the_training_pass(setup, monkeypatch):
    """Drafting (cache, streams at the last token only) computes what training (whole sequence, streams
    everywhere) computes at that position: the two code paths are one model."""
    from engines.drafters.streaming import StreamingDraft

    engine = setup[0]
    torch.manual_seed(1)
    draft = StreamingDraft(engine.target, torch.arange(64), n_layers=3, stream_layers=2, n_streams=2)
    with torch.no_grad():
        draft.streams.normal_()
        ids = [3, 9, 27, 17, 51, 2, 40]
        stack = draft.stack
        hidden = stack.run_causal(stack.embed(ids), 0, draft.stream_start)
        main, streams = draft.run_streams(hidden, torch.arange(len(ids)))
        full = torch.cat([draft.logits(main[0])[:, None], draft.logits(streams[0])], dim=1)  # [T, 1+S, V]
        cache = stack.new_cache(32)
        cached = [draft.step(ids[:4], cache)] + [draft.step([t], cache) for t in ids[4:]]
    for offset, window in enumerate(cached):
        torch.testing.assert_close(window, full[3 + offset], atol=1e-4, rtol=1e-4)
    assert cache.length(0) == cache.length(2) == len(ids)  # stream tokens never stay in the cache


def test_cats_adapters_train_and_draft(setup, monkeypatch):
    saved = _train(setup, monkeypatch, "cats", dm_layer=1, sv_layer=2, top_k=5)
    assert [name for name, _ in saved] == ["cats@1", "cats@2"]
    assert [card["cats_role"] for _, card in saved] == ["draft", "shallow_verifier"]
    engine = setup[0]
    reference = engine.run([5, 6, 7], "ar", max_new_tokens=20)
    for name, card in saved:
        # q spreads mass beyond the target's top K, which the reduced KL cannot remove: a higher floor
        ok, values = _falls(card, ratio=0.85)
        assert ok, f"{name} loss did not fall: {values}"
        run = engine.run([5, 6, 7], "eesd", max_new_tokens=20, exit_layer=card["exit_layer"], head="cats", gamma=3)
        assert run.token_ids == reference.token_ids


def test_moa_drafters_train_share_one_lsa_and_draft(setup, monkeypatch):
    saved = dict(_train(setup, monkeypatch, "moa", tli=(0, 1), ablation=True, control="eagle-matched"))
    assert list(saved) == ["moa-tli0", "moa-tli1", "moa-tli0-nolsa", "eagle-matched"]
    for name, card in saved.items():
        ok, values = _falls(card, 0.8)
        assert ok, f"{name} loss did not fall: {values}"
    assert saved["moa-tli1"]["deviations"] and not saved["moa-tli0"]["deviations"]
    engine = setup[0]
    shared = [engine.trained_drafter(n).lsa.qkv.weight for n in ("moa-tli0", "moa-tli1")]
    assert torch.equal(*shared)  # TLI 1 ships the LSA that TLI 0 trained
    reference = engine.run([9, 8, 7], "ar", max_new_tokens=20)
    for name in ("moa-tli0", "moa-tli1", "moa-tli0-nolsa"):
        run = engine.run([9, 8, 7], "moa", max_new_tokens=20, drafter=name)
        assert run.token_ids == reference.token_ids
    assert engine.run([9, 8, 7], "eagle", max_new_tokens=20, draft="eagle-matched").token_ids == reference.token_ids


def test_topk_loss_is_kl_to_the_renormalised_top_k():
    from engines.training.data import topk_distill_loss

    teacher = torch.log_softmax(torch.tensor([[3.0, 2.0, 0.0, -1.0]]), -1)
    student = torch.tensor([[0.5, 1.0, 2.0, 0.0]])
    p = torch.softmax(torch.tensor([3.0, 2.0]), -1)
    q = torch.log_softmax(student, -1)[0, :2]
    assert float(topk_distill_loss(student, teacher, 2)) == pytest.approx(float((p * (p.log() - q)).sum()), rel=1e-6)
    assert float(topk_distill_loss(teacher.clone(), teacher, 4)) == pytest.approx(0.0, abs=1e-6)  # q = p


def test_all_families_train_in_one_run_within_a_time_budget(setup, monkeypatch):
    """``specviz train all``: every family from one teacher pass per batch; a time budget cuts the step count
    after the probe steps, and every card holds its top-1 and top-4 held-out agreement."""
    import engines.training.recipes as recipes
    from engines.training import train as train_module

    engine, corpus, root = setup
    monkeypatch.setenv("SPECVIZ_DRAFTS", str(root / "all"))
    monkeypatch.setattr(recipes, "ALL_DRAFTERS", (("eagle", {}, None), ("exit", {"exit_layers": (2,),
                                                                                   "head_kinds": ("norm",)}, 5e-4)))
    monkeypatch.setattr(train_module, "BUDGET_PROBE", 2)
    config = TrainConfig(epochs=1000, batch_tokens=256, lr=3e-3, max_seconds=1e-6)
    saved = train_drafters("all", engine.target, "tiny-test", [corpus, corpus.parent / "missing-folder"], config,
                           draft_vocab_size=48)
    assert [name for name, _ in saved] == ["eagle", "exit@2-norm"]
    for name, card in saved:
        assert card["training"]["steps"] == 2  # the budget left no step beyond the probe
        assert card["training"]["lr"] == (5e-4 if name == "exit@2-norm" else 3e-3)
        assert 0 <= card["heldout_top1_agreement"] <= card["heldout_top4_agreement"] <= 1
    with pytest.raises(ValueError, match="max_seconds"):
        TrainConfig(max_seconds=0).validate()
    assert [family for family, _, _ in recipes.drafter_families("exit,eagle")] == ["eagle", "exit"]
    with pytest.raises(ValueError, match="comma-separated list"):
        recipes.drafter_families("eagle,nope")


def test_a_run_can_name_shipped_drafters_alone():
    """``specviz train exit@8-layer,tiny,cats@3``: each named drafter with the options that build it alone (a
    CATS adapter drafts or verifies as its shipped card says), its family's learning rate, families in order."""
    from engines.training.recipes import drafter_families, is_family_list

    assert drafter_families("cats@20,tiny,exit@8-layer,cats@3,exit@15-norm") == [
        ("tiny", {}, 5e-4), ("exit", {"exit_layers": (8,), "head_kinds": ("layer",)}, None),
        ("exit", {"exit_layers": (15,), "head_kinds": ("norm",)}, None),
        ("cats", {"dm_layer": None, "sv_layer": 20}, None), ("cats", {"dm_layer": 3, "sv_layer": ()}, None)]
    assert is_family_list("exit@8-layer") and not is_family_list("exit")
    with pytest.raises(ValueError, match="shipped drafters' names"):
        drafter_families("exit@8-middle")


def test_heldout_sample_spreads_over_the_split_and_keeps_about_the_cap():
    heldout = [{"answer_ids": [i] * 100, "source": "seeds" if i < 10 else "v2"} for i in range(100)]
    sample = heldout_sample(heldout, positions=2_000)
    assert sum(len(r["answer_ids"]) for r in sample) == 2_000
    assert {r["source"] for r in sample} == {"seeds", "v2"}  # not just the records listed first
    assert heldout_sample(heldout[:5], positions=2_000) == heldout[:5]  # a small split is measured whole


def test_the_learning_rate_rises_over_the_warm_up_then_decays_to_zero():
    from engines.training.train import lr_factor

    rising = [lr_factor(step, 100, warmup=10) for step in range(10)]
    assert rising == sorted(rising)
    assert rising == pytest.approx([(step + 1) / 10 * lr_factor(step, 100) for step in range(10)])
    assert lr_factor(0, 100) == 1.0 and lr_factor(100, 100, warmup=10) == pytest.approx(0.0, abs=1e-12)
    assert lr_factor(50, 100, warmup=10) == lr_factor(50, 100)  # after the rise, the same cosine
    with pytest.raises(ValueError, match="warmup_steps"):
        TrainConfig(warmup_steps=-1).validate()


def test_init_from_shipped_starts_each_drafter_from_the_shipped_one_of_its_name(setup, monkeypatch):
    """``--init-from shipped``: each student's trained tensors are the shipped drafter's of its name (as stored,
    in fp16), read out through the run's own draft vocabulary; a drafter of another kind, or one name for several
    students, is refused before training."""
    from engines.drafters.trained import save_trained, trained_state
    from engines.training.recipes import build_students, start_from_shipped

    engine, _, root = setup
    monkeypatch.setenv("SPECVIZ_DRAFTS", str(root / "warm"))
    stack = engine.target

    def students(vocab):  # one drafter of every family but eagle3 (whose recipe starts it: test_training_eagle3)
        built, extra = [], {}
        for family, options in (("tiny", {"tiny_layers": 2, "tiny_trained": 1}),
                                ("exit", {"exit_layers": (2,), "head_kinds": ("layer",)}),
                                ("ss", {"tiny_layers": 2, "tiny_trained": 1}), ("eagle", {}),
                                ("cats", {"dm_layer": 1, "sv_layer": ()}), ("moa", {"tli": (1,)})):
            more, described = build_students(family, stack, vocab, **options)
            built, extra = built + more, {**extra, **described}
        return built, extra

    torch.manual_seed(4)
    shipped, shipped_cards = students(torch.arange(48))
    for student in shipped:
        with torch.no_grad():
            for p in student.parameters():
                p.add_(0.05 * torch.randn_like(p))
        save_trained(student.name, student.module, shipped_cards[student.name])
    fresh, cards = students(torch.arange(40))  # another corpus, another draft vocabulary
    start_from_shipped(fresh, cards, "shipped")
    for old, new in zip(shipped, fresh):
        assert cards[new.name]["initialised_from"] == new.name
        theirs, ours = trained_state(old.module, cards[old.name]), trained_state(new.module, cards[new.name])
        assert theirs.keys() == ours.keys() and theirs
        for key, tensor in theirs.items():
            assert torch.equal(ours[key], tensor.half().float()), (new.name, key)
    assert torch.equal(fresh[0].module.draft_vocab, torch.arange(40))
    with pytest.raises(ValueError, match="init-from must be 'shipped'.*several drafters"):
        start_from_shipped(*students(torch.arange(40)), "tiny")
    exit_only, exit_cards = build_students("exit", stack, torch.arange(40), exit_layers=(2,), head_kinds=("layer",))
    with pytest.raises(ValueError, match="init-from: 'tiny' is a drafter of kind 'tiny', 'exit@2-layer' of kind 'exit_layer'"):
        start_from_shipped(exit_only, exit_cards, "tiny")
