"""The prompt box every dashboard page shares: one of the project's example prompts, or free text.

Choosing an example fills the text box; editing the text switches the picker to "free text". Each page
passes its own key prefix so pages keep separate prompts (and tests address their widgets by key).
"""

from __future__ import annotations

import streamlit as st

from specviz.prompts import Prompt, load_prompts

FREE_TEXT = -1
# The text box takes at most this many characters (a longer paste is cut there, the box showing the count): the
# model's 8,192-token context holds about 30,000 characters of prose, so nothing longer fits unless its tokens
# average over 12 characters; the engine refuses what does not fit, naming the limit.
MAX_TEXT_CHARS = 100_000


def prompt_picker(prompts: list[Prompt], prefix: str = "", category: str = "summarization") -> str:
    """The example selector and text box (keys ``{prefix}example`` / ``{prefix}prompt_text``); returns the text."""
    example_key, text_key = f"{prefix}example", f"{prefix}prompt_text"
    st.session_state.setdefault(example_key, default_example(prompts, category))
    st.session_state.setdefault(text_key, prompts[st.session_state[example_key]].turns[0])

    def example_chosen():
        if st.session_state[example_key] != FREE_TEXT:
            st.session_state[text_key] = prompts[st.session_state[example_key]].turns[0]

    def prompt_edited():
        chosen = st.session_state[example_key]
        if chosen != FREE_TEXT and st.session_state[text_key] != prompts[chosen].turns[0]:
            st.session_state[example_key] = FREE_TEXT

    st.selectbox("Prompt", [FREE_TEXT, *range(len(prompts))], key=example_key, on_change=example_chosen,
                 format_func=lambda i: "✍️ free text" if i == FREE_TEXT else example_label(prompts[i]),
                 help="One of the project's prompts (data/prompts.jsonl, first turn), or your own text below.")
    return st.text_area("Prompt text", key=text_key, height=110, on_change=prompt_edited,
                        label_visibility="collapsed", max_chars=MAX_TEXT_CHARS)


@st.cache_data
def example_prompts() -> list[Prompt]:
    """The project's evaluation prompts (``data/prompts.jsonl``), read once per server."""
    return load_prompts()


def example_label(prompt: Prompt, width: int = 70) -> str:
    text = " ".join(prompt.turns[0].split())
    short = text if len(text) <= width else text[: width - 1] + "…"
    return f"{prompt.category} · {short}"


def default_example(prompts: list[Prompt], category: str = "summarization") -> int:
    """Index of the first prompt of ``category`` (one that shows drafting well), else 0."""
    return next((i for i, p in enumerate(prompts) if p.category == category), 0)
