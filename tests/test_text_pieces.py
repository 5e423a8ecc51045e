"""Text pieces stream incrementally, never show a half character, and concatenate to the final text."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from engines import Engine
from engines.core.text_pieces import REPLACEMENT, IncrementalDetokenizer
from engines.model.loading import DEFAULT_MODEL, model_source

TEXTS = ["Café 🙂 日本語 naïve — ok", "🦜🦜 ünïcödé", "plain ascii, then 中文 at the end: 語"]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(model_source(DEFAULT_MODEL)))


@pytest.mark.parametrize("text", TEXTS)
def test_pieces_concatenate_to_the_text_and_never_split_a_character(tokenizer, text):
    ids = tokenizer.encode(text)
    assert any(REPLACEMENT in tokenizer.decode([i]) for i in ids)  # the case under test: a split character
    stream = IncrementalDetokenizer(lambda chunk: tokenizer.decode(chunk, skip_special_tokens=True))
    pieces = [stream.push(token) for token in ids] + [stream.flush()]
    assert "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=True) == text
    assert not any(REPLACEMENT in piece for piece in pieces)


def test_a_character_left_incomplete_at_the_end_is_flushed_as_the_whole_decoding_shows_it(tokenizer):
    ids = tokenizer.encode("日本")[:-1]
    stream = IncrementalDetokenizer(tokenizer.decode)
    pieces = [stream.push(token) for token in ids] + [stream.flush()]
    assert "".join(pieces) == tokenizer.decode(ids)


def test_a_run_streams_pieces_whose_concatenation_is_its_text():
    engine = Engine.load(dtype="float32")
    result = engine.run("Write the word 'naïve' and a smiling emoji, then the Japanese for Japan.", "pld",
                        max_new_tokens=40)
    pieces = [piece for event in result.events if event.kind == "commit" for piece in event.pieces]
    assert "".join(pieces) == result.text
    assert not any(REPLACEMENT in piece for piece in pieces)
