"""The packed weights' arena (engines.model.native.huge_pages): aligned, apart, alive, and switchable."""

import gc

import pytest
import torch

from engines.model.native import huge_pages
from engines.model.native.huge_pages import ALIGN, CHUNK_BYTES, HUGE_PAGE, PageArena


@pytest.mark.skipif(not huge_pages.huge_pages_available(), reason="no transparent huge pages here (macOS, Windows)")
def test_pieces_are_aligned_apart_and_keep_what_is_written_after_the_arena_moved_on():
    arena = PageArena(enabled=True)
    pieces = [arena.empty(n, dtype) for n, dtype in ((1000, torch.bfloat16), (3, torch.uint8), (777, torch.float32))]
    pieces += [arena.empty(CHUNK_BYTES // 4, torch.uint8) for _ in range(5)]  # a new chunk past the first
    pieces.append(arena.empty(CHUNK_BYTES, torch.uint8))  # a mapping of its own
    spans = sorted((p.data_ptr(), p.data_ptr() + p.numel() * p.element_size()) for p in pieces)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    assert all(p.data_ptr() % ALIGN == 0 for p in pieces)
    assert pieces[0].data_ptr() % HUGE_PAGE == 0 and pieces[-1].data_ptr() % HUGE_PAGE == 0
    for i, piece in enumerate(pieces):
        piece.fill_(i)
    del arena
    gc.collect()
    assert all(bool((piece == i).all()) for i, piece in enumerate(pieces))


def test_a_disabled_or_paused_arena_is_torch_empty():
    for arena in (PageArena(enabled=False), PageArena(enabled=True)):
        with arena.paused():
            piece = arena.empty(10, torch.float32)
        assert piece.untyped_storage().nbytes() == 40  # its own storage, not a slice of a mapping


def test_the_switch_is_checked(monkeypatch):
    monkeypatch.setenv("SPECVIZ_HUGE_PAGES", "yes")
    with pytest.raises(ValueError, match="SPECVIZ_HUGE_PAGES"):
        PageArena()
    monkeypatch.setenv("SPECVIZ_HUGE_PAGES", "0")
    assert not PageArena().enabled
    monkeypatch.setenv("SPECVIZ_HUGE_PAGES", "1")
    assert PageArena().enabled == huge_pages.huge_pages_available()


@pytest.mark.skipif(not huge_pages.huge_pages_wanted(), reason="no transparent huge pages here")
def test_the_native_steps_packed_weights_are_carved_from_the_arena_and_give_the_same_logits():
    from engines import Engine
    from engines.model.native import step as native_step
    from tests.conftest import tiny_llama

    if not native_step.available():
        pytest.skip("the native step does not build here")
    model = tiny_llama(vocab=64, layers=2, seed=3)
    engine = Engine(model)
    with torch.inference_mode():
        logits = engine.target.forward(list(range(3, 20)), engine.target.new_cache(64))
    mapped = [kept[1] for p in model.parameters() for kept in p.__dict__.get("_specviz_packed", {}).values()]
    mapped += [p.__dict__["_specviz_pair"][1] for p in model.parameters() if "_specviz_pair" in p.__dict__]
    assert mapped and all(t.untyped_storage().nbytes() == CHUNK_BYTES + HUGE_PAGE for t in mapped)
    engine.target.native._arena.enabled = False  # packed again with plain storage: the same bits
    for p in model.parameters():
        p.__dict__.pop("_specviz_packed", None), p.__dict__.pop("_specviz_pair", None)
    with torch.inference_mode():
        assert torch.equal(engine.target.forward(list(range(3, 20)), engine.target.new_cache(64)), logits)
