"""Trained drafters shipped in ``data/drafts/<name>/``: fp16 safetensors plus a model card (JSON).

One loader serves every method: :func:`load_trained` reads the card, checks it against the target
and against the weights (a card that disagrees with its weights — shapes, vocabulary — is refused),
and builds the module in the target's dtype and device. Names:

- ``tiny`` — an independent ``LlamaForCausalLM`` (the target's first layers, the top ones distilled),
  usable by ``sps`` and by Hugging Face's ``generate(assistant_model=…)``;
- ``exit@ℓ-norm`` / ``exit@ℓ-layer`` — early-exit heads for ``eesd``;
- ``eagle`` — the EAGLE feature head (chain drafting in ``sps``; trees later);
- ``ss`` — Draft-4L with speculative-streaming lookahead streams (``sps``; Mirror-SD's draft);
- ``cats@ℓ`` — the CATS adapter at ℓ (draft boundary L_DM, shallow verifier L_SV); ``eesd(head=cats)``;
- ``moa-tli{0,1,3}`` / ``moa-tli0-nolsa`` — Mixture-of-Attentions drafters (``moa``).

Frozen parts shared with the target (embeddings, LM head, copied lower layers) are not stored: they
are taken from the target at load time, which keeps every file small.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from engines.drafters.model_draft import restrict_head_to_vocab
from engines.drafters.registry import KINDS_BY_NAME, drafter_kind
from engines.model.layers import LayerStack

SHIPPED_DRAFTS = Path(__file__).resolve().parents[2] / "data" / "drafts"


def drafts_dir() -> Path:
    """``data/drafts`` of this checkout; ``SPECVIZ_DRAFTS`` points elsewhere (tests, experiments)."""
    return Path(os.environ.get("SPECVIZ_DRAFTS") or SHIPPED_DRAFTS)


def available() -> list[str]:
    root = drafts_dir()
    return sorted(p.name for p in root.iterdir() if (p / "card.json").exists()) if root.exists() else []


def exit_head_name(exit_layer: int, kind: str) -> str:
    """``exit@ℓ-norm`` / ``exit@ℓ-layer``, or ``cats@ℓ`` for the CATS adapter at ℓ."""
    return f"cats@{exit_layer}" if kind == "cats" else f"exit@{exit_layer}-{kind}"


def read_card(name: str) -> dict:
    path = drafts_dir() / name / "card.json"
    if not path.exists():
        raise ValueError(f"no trained drafter {name!r} in {drafts_dir()}; available: {', '.join(available()) or 'none'}"
                         " (train one with `specviz train`)")
    return json.loads(path.read_text())


def check_card_against_target(card: dict, stack: LayerStack) -> None:
    config = stack.config
    expected = {"vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
                "target_layers": stack.n_layers}
    for key, value in expected.items():
        if card.get(key) != value:
            raise ValueError(f"drafter {card.get('name')!r} was trained for {key}={card.get(key)}, "
                             f"but the target has {key}={value}")


def build_module(card: dict, stack: LayerStack) -> torch.nn.Module:
    """The untrained module the card describes, initialised from the target (trainers start here)."""
    vocab_ids = torch.zeros(card["draft_vocab_size"], dtype=torch.long)
    return drafter_kind(card["kind"]).build(card, stack, vocab_ids)


def trained_state(module: torch.nn.Module, card: dict) -> dict:
    """The trained tensors a drafter's file holds (the draft vocabulary is stored beside them)."""
    prefixes = drafter_kind(card["kind"]).stored_prefixes
    state = module.state_dict()
    return dict(state) if prefixes is None else {k: v for k, v in state.items() if k.startswith(prefixes(card))}


def draft_vocab(module: torch.nn.Module) -> torch.Tensor:
    head = getattr(module, "head", None)  # heads and ss read out through a SharedHead; tiny keeps a buffer
    return head.vocab_ids if head is not None else module.draft_vocab


def save_trained(name: str, module: torch.nn.Module, card: dict) -> Path:
    folder = drafts_dir() / name
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.half().cpu().contiguous() for k, v in trained_state(module, card).items()}
    state["draft_vocab"] = draft_vocab(module).to("cpu", torch.int32).contiguous()
    save_file(state, str(folder / "model.safetensors"))
    (folder / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    return folder


def load_trained(name: str, stack: LayerStack) -> tuple[torch.nn.Module, dict]:
    """Module (target dtype/device, eval mode) and its card; refuses cards that disagree with weights."""
    card = read_card(name)
    check_card_against_target(card, stack)
    module = build_module(card, stack)
    weights = load_file(str(drafts_dir() / name / "model.safetensors"))
    vocab = weights.pop("draft_vocab", None)
    if vocab is None or vocab.numel() != card["draft_vocab_size"]:
        raise ValueError(f"drafter {name!r}: the card says a draft vocabulary of {card['draft_vocab_size']} tokens, "
                         f"the weights hold {None if vocab is None else vocab.numel()}")
    if int(vocab.max()) >= card["vocab_size"]:
        raise ValueError(f"drafter {name!r}: draft vocabulary ids exceed the vocabulary size {card['vocab_size']}")
    expected = module.state_dict()
    for key, tensor in weights.items():
        if key not in expected or expected[key].shape != tensor.shape:
            raise ValueError(f"drafter {name!r}: weight {key} {tuple(tensor.shape)} does not match the card's "
                             f"architecture ({tuple(expected[key].shape) if key in expected else 'no such weight'})")
    missing = set(trained_state(module, card)) - set(weights)
    if missing:
        raise ValueError(f"drafter {name!r}: weights missing for {sorted(missing)[:3]}")
    module.load_state_dict(weights, strict=False)
    set_vocab(module, vocab.long())
    if card["kind"] == "tiny":
        restrict_head_to_vocab(module, vocab.long())
    module.to(device=stack.device, dtype=stack.dtype).eval()
    module.requires_grad_(False)
    return module, card


def set_vocab(module: torch.nn.Module, vocab_ids: torch.Tensor) -> None:
    if getattr(module, "head", None) is not None:
        module.head.vocab_ids = vocab_ids.to(module.head.vocab_ids.device)
    else:
        module.register_buffer("draft_vocab", vocab_ids, persistent=False)


def shipped_kind(name: str) -> str | None:
    """The kind of the shipped drafter ``name`` (``None``: not a shipped drafter, e.g. a model path)."""
    return read_card(name).get("kind") if name in available() else None


def drafters_for(use: str) -> list[str]:
    """Shipped drafters a method can draft with (``use``: one of SPS, VERDICT, TREE, EXIT, MOA): what the
    dashboard offers and what validation messages list."""
    names = []
    for name in available():
        kind = KINDS_BY_NAME.get(read_card(name).get("kind"))
        if kind is not None and use in kind.used_by:
            names.append(name)
    return names
