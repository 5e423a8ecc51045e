"""EAGLE-3-style training (engines/training/ttt.py, engines/drafters/eagle3_head.py) on a tiny random target:
the unrolled training pass is exactly what the head computes when it drafts, the head trains and drafts
losslessly through chains and trees, and the old EAGLE head's card still loads."""

import pytest
import torch

from engines.drafters.eagle3_head import Eagle3Head, check_feature_layers, default_feature_layers
from engines.drafters.heads import EagleHead
from engines.training.data import Batch, teacher
from engines.training.recipes import train_drafters
from engines.training.train import TrainConfig
from engines.training.ttt import ttt_mask, unroll
from tests.conftest import trainer_setup


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return trainer_setup(tmp_path_factory, "eagle3", prompts=40, answer_tokens=24)


def test_ttt_mask_lets_step_j_see_its_chain_and_the_target_fed_keys_before_it():
    mask = ttt_mask(5, 3, torch.float32)[0, 0] == 0  # [5, 15]: steps 1, 2, 3 end to end
    p = 4  # the chain began at s = 2: target-fed keys 0..2, its step-2 key at 3, its step-3 key at 4
    assert mask[p, :5].tolist() == [True, True, True, False, False]
    assert mask[p, 5:10].tolist() == [False, False, False, True, False]
    assert mask[p, 10:].tolist() == [False, False, False, False, True]
    assert mask.any(-1).all()  # no empty row (p < 2 sees its own key only)
    with pytest.raises(ValueError, match="step"):
        ttt_mask(5, 0, torch.float32)


def test_unrolled_training_pass_equals_the_heads_own_drafting(setup):
    """Step j of the unrolled pass at every position is what the head computes drafting its j-th token after a
    cache fed target features up to the chain's start (fp32, teacher-forced tokens)."""
    engine = setup[0]
    stack = engine.target
    torch.manual_seed(0)
    head = Eagle3Head(stack, torch.arange(64), (1, 2, 3)).float()
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ids = torch.randint(0, 64, (1, 12))
    signals = teacher(stack, Batch(ids, torch.ones_like(ids, dtype=torch.bool)), (1, 2, 3), torch.arange(64))
    features = head.target_feature(torch.cat([signals["hidden"][layer] for layer in (1, 2, 3)], -1))[:, :-1]
    embeddings = stack.embed(ids[:, 1:]).float()
    with torch.no_grad():
        outputs = unroll(head, stack, embeddings, features, 4)
        for start in (0, 3, 6):
            cache = head.new_cache(64)
            out = head.features(embeddings[:, :start + 1], features[:, :start + 1], cache)[:, -1:]
            assert torch.allclose(out, outputs[0][:, start:start + 1], atol=1e-5)
            for step in range(2, 5):
                p = start + step - 1
                out = head.features(embeddings[:, p:p + 1], out, cache)
                assert torch.allclose(out, outputs[step - 1][:, p:p + 1], atol=1e-5), (start, step)


def test_eagle3_trains_drafts_losslessly_and_the_old_head_still_loads(setup, monkeypatch):
    engine, corpus, root = setup
    monkeypatch.setenv("SPECVIZ_DRAFTS", str(root / "drafts"))
    config = TrainConfig(epochs=20, batch_tokens=256, lr=3e-3)
    saved = train_drafters("eagle3", engine.target, "tiny-test", corpus, config, draft_vocab_size=48,
                           feature_layers=(1, 2, 3), ttt_depth=3)
    (name, card), = saved
    assert card["kind"] == "eagle" and card["architecture"] == "eagle3" and card["feature_layers"] == [1, 2, 3]
    assert card["ttt_depth"] == 3 and "training-time test" in card["training"]["loss"]
    curve = [loss for _, loss in card["training"]["loss_curve"]]
    assert sum(curve[-5:]) / 5 < 0.7 * sum(curve[:5]) / 5, curve
    head = engine.trained_drafter(name)
    assert isinstance(head, Eagle3Head) and head.observe_layers == (1, 2, 3)
    reference = engine.run([9, 8, 7], "ar", max_new_tokens=20)
    chain = engine.run([9, 8, 7], "sps", max_new_tokens=20, draft=name, gamma=4)
    tree = engine.run([9, 8, 7], "eagle", max_new_tokens=20, draft=name, depth=3, topk=2)
    assert chain.token_ids == reference.token_ids == tree.token_ids
    assert chain.stats.acceptance_rate > 0.2
    remote = engine.run([9, 8, 7], "eagle", max_new_tokens=12, draft=name, depth=3, topk=2, network="local")
    assert remote.token_ids == reference.token_ids[:len(remote.token_ids)]

    (old, old_card), = train_drafters("eagle", engine.target, "tiny-test", corpus,
                                      TrainConfig(max_steps=2, batch_tokens=256), draft_vocab_size=48)
    assert "architecture" not in old_card  # cards written before EAGLE-3 say nothing: the EAGLE head
    loaded = engine.trained_drafter(old)
    assert type(loaded) is EagleHead and loaded.observe_layers == (4,)


def test_a_head_started_from_an_eagle_head_drafts_its_first_token_as_that_head_does(setup):
    """``--init-from``: the fusion passes the last layer (through the final norm the EAGLE head reads it with) and
    the output norm only rescales, so the first draft's features are the EAGLE head's, normed, and its argmax
    is the EAGLE head's; a high layer other than the last, or a state of another shape, is refused."""
    stack = setup[0].target
    torch.manual_seed(1)
    eagle = EagleHead(stack, torch.arange(64)).float()
    with torch.no_grad():
        for p in eagle.parameters():
            p.add_(0.05 * torch.randn_like(p))
    last = stack.n_layers
    head = Eagle3Head(stack, torch.arange(64), (1, 2, last)).float()
    head.start_from(eagle.state_dict())
    ids = torch.randint(0, 64, (1, 10))
    signals = teacher(stack, Batch(ids, torch.ones_like(ids, dtype=torch.bool)), (1, 2, last), torch.arange(64))
    seen = {layer: signals["hidden"][layer] for layer in (1, 2, last)}
    embeddings = stack.embed(ids[:, 1:]).float()
    with torch.no_grad():
        old = eagle.features(embeddings, eagle.target_feature(eagle.observed_rows(seen, 10))[:, :-1])
        new = head.features(embeddings, head.target_feature(head.observed_rows(seen, 10))[:, :-1])
        assert torch.allclose(new, head.out_norm(old), atol=1e-5)
        assert torch.equal(head(new).argmax(-1), eagle(old).argmax(-1))
    with pytest.raises(ValueError, match="feature_layers must end at the last layer"):
        Eagle3Head(stack, torch.arange(64), (1, 2, 3)).start_from(eagle.state_dict())
    with pytest.raises(ValueError, match="lacks or misshapes"):
        head.start_from({"fc.weight": torch.zeros(1)})


def test_init_from_names_a_shipped_drafter(tmp_path, monkeypatch):
    from engines.training.recipes import shipped_state

    monkeypatch.setenv("SPECVIZ_DRAFTS", str(tmp_path))
    with pytest.raises(ValueError, match="init-from must name a drafter in .*'nowhere'"):
        shipped_state("nowhere")


def test_feature_layers_are_checked():
    assert default_feature_layers(30) == (2, 15, 27)
    assert check_feature_layers((3, 1, 2), 4) == (1, 2, 3)
    for bad in ((1, 2), (1, 1, 2), (0, 1, 2), (1, 2, 5)):
        with pytest.raises(ValueError, match="feature_layers"):
            check_feature_layers(bad, 4)


def test_hass_objective_is_the_cross_entropy_on_the_targets_top_k():
    from engines.training.ttt import top_k_cross_entropy

    teacher = torch.log_softmax(torch.tensor([[2.0, 1.0, 0.0, -1.0]]), -1)
    student = torch.tensor([[0.5, 1.0, 2.0, 0.0]])
    p, q = teacher.exp()[0], torch.log_softmax(student, -1)[0]
    assert float(top_k_cross_entropy(student, teacher, 2)) == pytest.approx(float(-(p[:2] * q[:2]).sum()), rel=1e-6)
    assert float(top_k_cross_entropy(student, teacher, 2)) < float(top_k_cross_entropy(student, teacher, 4))
    from engines.training.ttt import Eagle3Student

    with pytest.raises(ValueError, match="hass_top_k"):
        Eagle3Student("x", None, None, 2, hass_top_k=-1)


def test_init_from_an_eagle3_head_continues_it_on_its_own_feature_layers(setup, monkeypatch):
    """``--init-from eagle3``: every trained tensor taken as it is, the feature layers read off its card, and
    other feature layers refused."""
    from engines.drafters.trained import save_trained
    from engines.training.recipes import eagle3_students

    engine, _, root = setup
    monkeypatch.setenv("SPECVIZ_DRAFTS", str(root / "continue"))
    stack = engine.target
    torch.manual_seed(2)
    trained = Eagle3Head(stack, torch.arange(48), (1, 2, 3)).float()
    with torch.no_grad():
        for p in trained.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    save_trained("old3", trained, {"kind": "eagle", "architecture": "eagle3", "feature_layers": [1, 2, 3],
                                   "draft_vocab_size": 48})
    (student,), cards = eagle3_students(stack, torch.arange(48), init_from="old3")
    head = student.module
    assert head.feature_layers == (1, 2, 3) and cards["eagle3"]["initialised_from"] == "old3"
    for name, tensor in trained.state_dict().items():
        if name.startswith(("fc.", "layer.", "layer_norms.", "combine.", "out_norm.")):
            assert torch.allclose(head.state_dict()[name], tensor.half().float()), name
    with pytest.raises(ValueError, match=r"feature_layers must be \[1, 2, 3\]"):
        eagle3_students(stack, torch.arange(48), feature_layers=(1, 3, 4), init_from="old3")
    with pytest.raises(ValueError, match="continue lacks or misshapes"):
        head.start_from({"combine.weight": torch.zeros(1)})
