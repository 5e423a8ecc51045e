"""Streamlit-free helpers for the CATS page (``views/cats.py``): choices, settings, metrics, captions.

Kept apart from the page script for the same reason as ``method_options``: the page reads top to
bottom as a layout, and these pieces can be checked without a Streamlit runtime.
"""

from __future__ import annotations

from engines.core.trace import Event
from engines.memory_budget import weight_stream
from specviz.experiments.cats_sweeps import shipped_cats_layers
from specviz.views.cats_cycles import decode_bytes_per_token, is_lossy, memory_caption

MB = weight_stream.MB
ACCEPTANCE_LABELS = {"greedy": "greedy (lossless, temperature 0)", "sample": "sample (lossless)",
                     "typical": "typical (LOSSY)"}
STREAM_LABELS = {"deep": "deep: layers 1..k pinned, the rest streamed every forward",
                 "all": "all: every layer streamed, the first k held for a cycle"}


def adapter_choices() -> tuple[list[int], list[int]]:
    """The shipped CATS adapters: (draft layers ℓ_DM, shallow-verifier layers ℓ_SV), listed afresh."""
    return shipped_cats_layers("draft"), shipped_cats_layers("shallow_verifier")


def sv_choices(verifiers: list[int], dm_layer: int) -> list[int]:
    """Shallow verifiers above the draft layer (the method needs ℓ_DM < ℓ_SV)."""
    return [layer for layer in verifiers if layer > dm_layer]


def cats_options(dm_layer: int, sv_layer: int, gamma: int, acceptance: str) -> dict:
    return {"dm_layer": int(dm_layer), "sv_layer": int(sv_layer), "gamma": int(gamma), "acceptance": acceptance}


def generation_settings(max_new_tokens: int, acceptance: str, temperature: float, seed: int) -> dict:
    """Greedy acceptance needs temperature 0; the others sample at ``temperature``."""
    return {"max_new_tokens": int(max_new_tokens), "temperature": 0.0 if acceptance == "greedy" else float(temperature),
            "seed": int(seed), "top_p": 1.0}


def memory_options(stack, use_budget: bool, resident_layers: int, flash_mb_s: float, stream: str) -> dict:
    """``Engine.generate``'s budget arguments keeping layers 0..``resident_layers``−1 resident (mode ``deep``;
    held per cycle in mode ``all``), or nothing without a budget."""
    if not use_budget:
        return {}
    return {"memory_budget_mb": weight_stream.budget_for_resident_layers(stack, int(resident_layers)),
            "flash_mb_s": float(flash_mb_s), "stream": stream}


def budget_caption(stack, resident_layers: int) -> str:
    budget = weight_stream.budget_for_resident_layers(stack, int(resident_layers))
    streamed = sum(weight_stream.layer_bytes(stack)[int(resident_layers):])
    return (f"budget {budget:.1f} MB (of {weight_stream.budget_for_resident_layers(stack, stack.n_layers):.1f} MB "
            f"for the whole model) · {streamed / MB:.1f} MB streamed per deep pass")


def metric_values(stats: dict, events: list[Event], ar_stats: dict | None) -> dict[str, str]:
    """The five headline numbers of a CATS run, formatted."""
    speedup = stats["tokens_per_s"] / ar_stats["tokens_per_s"] if ar_stats and ar_stats["tokens_per_s"] else None
    bpt = decode_bytes_per_token(events)
    return {
        "tok/s": f"{stats['tokens_per_s']:.1f}",
        "τ (mean accepted length)": f"{stats['mean_accepted_length']:.2f}",
        "BPT (MB per token)": f"{bpt / MB:.1f}" if stats.get("bytes_streamed") else "—",
        "speedup vs ar (same budget)": "—" if speedup is None else f"{speedup:.2f}×",
        "bytes streamed (MB)": f"{stats.get('bytes_streamed', 0) / MB:.0f}" if stats.get("bytes_streamed") else "—",
    }


METRIC_HELP = {
    "tok/s": "Generated tokens per second of decoding (prefill excluded, model load excluded).",
    "τ (mean accepted length)": "Tokens committed per cycle (one deep pass): the accepted path, a taken correction "
                                "included, plus the target's own bonus or correction token.",
    "BPT (MB per token)": "Bytes per token, the paper's measure: weight bytes read from the emulated flash per "
                          "decoding cycle ÷ τ (the prefill's pass left out).",
    "speedup vs ar (same budget)": "tok/s of this run ÷ tok/s of autoregressive decoding of the same prompt under the "
                                   "same memory budget, flash bandwidth and sampling settings, on the same engine.",
    "bytes streamed (MB)": "Everything the run read from the layer files, the prefill's pass included.",
}


def run_caption(run: dict) -> str:
    """Lossless or LOSSY, the budget, the counts and the baseline, in a line."""
    stats, ar = run["stats"], run["ar"]
    label = "**LOSSY** (typical acceptance: the output may differ from the target's)" if is_lossy(run["events"]) \
        else "lossless"
    same = ""
    if run["settings"]["temperature"] == 0:
        same = " · output equals ar: " + ("yes ✓" if run["text"] == ar["text"] else "**no**")
    peak = f" · peak {stats['peak_resident_bytes'] / MB:.0f} MB resident" if stats.get("peak_resident_bytes") else ""
    return (f"{label} · {memory_caption(run['events'])}{peak} · {stats['new_tokens']} new tokens in {stats['rounds']} "
            f"cycles · ar under the same budget {ar['stats']['tokens_per_s']:.1f} tok/s ({run['ar_source']}){same}")
