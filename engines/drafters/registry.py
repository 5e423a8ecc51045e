"""Every kind of trained drafter, declared once: how its module is built from its model card, what its file
stores, what training minimises, and which methods draft with it.

Before this, the kinds were strings in five places (the loader, the recipes, ``sps``, the verdict methods,
the tree method); adding a kind now means one entry here, its module, and its student in
``engines.training``. Shipped drafters are named by their folder in ``data/drafts`` and found by the
``kind`` their card declares, so ``eagle-matched`` is an EAGLE head because its card says so, not because
of its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from engines.drafters.eagle3_head import eagle_head
from engines.drafters.heads import AdapterHead, ExitLayerHead, ExitNormHead
from engines.drafters.moa_head import MoAHead
from engines.drafters.model_draft import tiny_model
from engines.drafters.streaming import StreamingDraft
from engines.model.layers import LayerStack

# the methods that can draft with a kind (the option that names it): sps(draft=…) chains, mirror/ssd(draft=…)
# on their draft lane, eagle(draft=…) trees, eesd/ppsd(head=…) exits, moa(tli=…)
SPS, VERDICT, TREE, EXIT, MOA = "sps", "verdict", "tree", "exit", "moa"


@dataclass(frozen=True)
class DrafterKind:
    kind: str
    build: Callable[[dict, LayerStack, torch.Tensor], nn.Module]  # (card, target, draft vocabulary) → module
    loss: str  # what its trainer minimises (written into every card)
    used_by: tuple[str, ...]
    stored_prefixes: Callable[[dict], tuple[str, ...]] | None = None  # None: the whole state dict is trained


def _lower_layers_and_norm(model_prefix: str) -> Callable[[dict], tuple[str, ...]]:
    """Drafts built on copies of the target's lower layers store only the layers they trained and their norm."""
    return lambda card: tuple(f"{model_prefix}layers.{i}." for i in card["trained_layers"]) + (
        f"{model_prefix}norm.", "streams")


KINDS_BY_NAME: dict[str, DrafterKind] = {kind.kind: kind for kind in (
    DrafterKind("tiny", lambda card, stack, vocab: tiny_model(stack, card["layers"]),
                "KL(target ‖ draft) on the draft vocabulary", (SPS, VERDICT, TREE), _lower_layers_and_norm("model.")),
    DrafterKind("exit_norm", lambda card, stack, vocab: ExitNormHead(stack, vocab),
                "KL(target ‖ head) on the draft vocabulary", (EXIT, TREE)),
    DrafterKind("exit_layer", lambda card, stack, vocab: ExitLayerHead(stack, vocab, card["exit_layer"]),
                "KL(target ‖ head) on the draft vocabulary", (EXIT,)),
    DrafterKind("eagle", eagle_head,  # the card's architecture: eagle1 (absent) or eagle3 (Eagle3Head)
                "SmoothL1(feature) + 0.1·KL(target ‖ head) on the draft vocabulary (EAGLE), noise 0.05·std on "
                "input features", (SPS, TREE)),
    DrafterKind("ss", lambda card, stack, vocab: StreamingDraft(stack, vocab, card["layers"], card["stream_layers"],
                                                                card["streams"]),
                "KL(target ‖ main stream) + Σ_j w^j·CE(stream j → token t+1+j) on the draft vocabulary "
                "(future n-gram)", (SPS, VERDICT), _lower_layers_and_norm("model.model.")),
    DrafterKind("cats_adapter", lambda card, stack, vocab: AdapterHead(stack, vocab, card["exit_layer"]),
                "reduced top-K KL(p̃ ‖ q), p̃ the target renormalised on its top K, on the draft vocabulary (CATS)",
                (EXIT,)),
    DrafterKind("moa", lambda card, stack, vocab: MoAHead(stack, vocab, card["tli"], card["lsa"]),
                "1.0·SmoothL1(ô / RMS(o), o / RMS(o)) + 0.1·KL(target ‖ draft) on the draft vocabulary (MoA Eq. 2), "
                "CA block mask with K ~ U[5, 15]", (MOA,)),
)}
KINDS = tuple(KINDS_BY_NAME)


# Drafters with no model to train or load (engines.drafters.suffix), named by a `draft` option's value: the uses
# that offer them. Trees merge suffix candidates through eagle/moa(merge_suffix=true), ssd through backup=suffix.
MODEL_FREE: dict[str, tuple[str, ...]] = {"suffix": (SPS,)}


def model_free_drafters(use: str) -> tuple[str, ...]:
    """The model-free drafters a method's ``draft`` option takes (``use``: SPS, VERDICT, TREE, …)."""
    return tuple(name for name, uses in MODEL_FREE.items() if use in uses)


def drafter_kind(kind: str) -> DrafterKind:
    if kind not in KINDS_BY_NAME:
        raise ValueError(f"model card kind must be one of {KINDS}, got {kind!r}")
    return KINDS_BY_NAME[kind]


def drafter_kind_names(use: str) -> tuple[str, ...]:
    """The kinds a method can draft with."""
    return tuple(name for name, kind in KINDS_BY_NAME.items() if use in kind.used_by)
