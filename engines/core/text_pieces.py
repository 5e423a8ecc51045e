"""Turning committed token ids into text pieces, incrementally and safe for UTF-8 split across tokens.

A byte-level tokenizer may cut one character (an accented letter, an emoji, a CJK character) across two or
three tokens; decoding the first alone yields U+FFFD. Re-decoding the whole answer at every commit would fix
that on the next token but costs O(n²) and has already shown the replacement character to the consumer.
So, as vLLM and Hugging Face's ``TextStreamer`` do, only a short window is decoded — from a few tokens
before the text already emitted — and a piece that ends in an incomplete character is held back until the
token that completes it arrives. The pieces of a run concatenate to exactly its final text.
"""

from __future__ import annotations

from typing import Callable

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, detokenize: Callable[[list[int]], str]):
        self.detokenize = detokenize
        self.ids: list[int] = []
        self.prefix_offset = 0  # the window decoded starts here (context for leading-space rules)
        self.read_offset = 0  # text up to here has been emitted

    def push(self, token: int) -> str:
        """The text ``token`` completes ("" while a character is still incomplete)."""
        self.ids.append(token)
        emitted = self.detokenize(self.ids[self.prefix_offset:self.read_offset])
        window = self.detokenize(self.ids[self.prefix_offset:])
        if len(window) <= len(emitted) or window.endswith(REPLACEMENT):
            return ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return window[len(emitted):]

    def flush(self) -> str:
        """What is still held back at the end of a run (an incomplete character stays as U+FFFD, as the
        whole answer's decoding shows it)."""
        emitted = self.detokenize(self.ids[self.prefix_offset:self.read_offset])
        window = self.detokenize(self.ids[self.prefix_offset:])
        self.prefix_offset = self.read_offset = len(self.ids)
        return window[len(emitted):]
