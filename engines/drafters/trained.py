"""Trained drafters shipped in ``data/drafts/<name>/``: fp16 safetensors plus a model card (JSON).

One loader serves every method: :func:`load_trained` reads the card, checks it against the target
and against the weights (a card that disagrees with its weights — their size and sha256 where the card
records them, shapes, vocabulary — is refused with what to do), and builds the module in the target's
dtype and device. :func:`save_trained` writes weights and card together, whole or not at all. Names:

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

import hashlib
import json
import os
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from engines.drafters.model_draft import restrict_head_to_vocab
from engines.drafters.registry import KINDS_BY_NAME, drafter_kind
from engines.model.layers import LayerStack
from engines.storage import report_once, staged_directory

WEIGHTS = "model.safetensors"
SHIPPED_DRAFTS = Path(__file__).resolve().parents[2] / "data" / "drafts"


def drafts_dir() -> Path:
    """``data/drafts`` of this checkout; ``SPECVIZ_DRAFTS`` points elsewhere (tests, experiments)."""
    return Path(os.environ.get("SPECVIZ_DRAFTS") or SHIPPED_DRAFTS)


def available() -> list[str]:
    """Drafters with a card (a name starting with a dot is a save in progress, or one a killed run left)."""
    root = drafts_dir()
    return sorted(p.name for p in root.iterdir()
                  if not p.name.startswith(".") and (p / "card.json").exists()) if root.exists() else []


def exit_head_name(exit_layer: int, kind: str) -> str:
    """``exit@ℓ-norm`` / ``exit@ℓ-layer``, or ``cats@ℓ`` for the CATS adapter at ℓ."""
    return f"cats@{exit_layer}" if kind == "cats" else f"exit@{exit_layer}-{kind}"


REMEDY = ("restore the folder whole (a shipped drafter: `git checkout -- data/drafts/{name}`) or train it again "
          "(`specviz train`)")


def read_card(name: str) -> dict:
    """The drafter's card; ``ValueError`` naming it where there is none or it does not read (a drafter is data the
    project ships, not a cache: it is refused, never quietly replaced)."""
    path = drafts_dir() / name / "card.json"
    if not path.exists():
        raise ValueError(f"no trained drafter {name!r} in {drafts_dir()}; available: {', '.join(available()) or 'none'}"
                         " (train one with `specviz train`)")
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"drafter {name!r}: {path} does not read ({error}); {REMEDY.format(name=name)}") from None
    if not isinstance(card, dict):
        raise ValueError(f"drafter {name!r}: {path} is not a card (a JSON object); {REMEDY.format(name=name)}")
    return card


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
    """Weights and card written together into a staging folder renamed into place, so the card in
    ``data/drafts/NAME`` always describes the weights beside it (their size and sha256, under ``weights``),
    and a run killed while saving leaves the previous drafter whole."""
    folder = drafts_dir() / name
    state = {k: v.half().cpu().contiguous() for k, v in trained_state(module, card).items()}
    state["draft_vocab"] = draft_vocab(module).to("cpu", torch.int32).contiguous()
    with staged_directory(folder) as staging:
        save_file(state, str(staging / WEIGHTS))
        described = {**card, "weights": weights_record(staging / WEIGHTS)}
        (staging / "card.json").write_text(json.dumps(described, indent=2) + "\n")
    return folder


def weights_record(path: Path) -> dict:
    """What a card says of its weights file: enough to tell it from any other save."""
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return {"file": path.name, "bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def read_weights(name: str, card: dict) -> dict[str, torch.Tensor]:
    """The drafter's tensors; ``ValueError`` naming the folder and what to do where the file is missing, does not
    read (cut short), or is not the file the card describes (cards written before ``weights`` existed are
    checked by shapes alone, in :func:`load_trained`)."""
    folder = drafts_dir() / name
    path = folder / WEIGHTS
    if not path.exists():
        raise ValueError(f"drafter {name!r}: {path} is missing; {REMEDY.format(name=name)}")
    recorded = card.get("weights")
    if recorded is not None and weights_record(path) != {**recorded, "file": WEIGHTS}:
        raise ValueError(f"drafter {name!r}: {WEIGHTS} in {folder} is not the file its card describes "
                         f"({path.stat().st_size} bytes; the card says {recorded.get('bytes')} bytes, sha256 "
                         f"{str(recorded.get('sha256'))[:12]}…): the two come from different saves, or the file "
                         f"was damaged; {REMEDY.format(name=name)}")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as error:
        raise ValueError(f"drafter {name!r}: {path} does not read ({error}); {REMEDY.format(name=name)}") from None


def load_trained(name: str, stack: LayerStack) -> tuple[torch.nn.Module, dict]:
    """Module (target dtype/device, eval mode) and its card; refuses cards that disagree with weights."""
    card = read_card(name)
    check_card_against_target(card, stack)
    module = build_module(card, stack)
    weights = read_weights(name, card)
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
        try:
            card = read_card(name)
        except ValueError as error:  # a damaged drafter is not offered; using it by name says why
            report_once(drafts_dir() / name / "card.json", f"specviz: {error}")
            continue
        kind = KINDS_BY_NAME.get(card.get("kind"))
        if kind is not None and use in kind.used_by:
            names.append(name)
    return names
