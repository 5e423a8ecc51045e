"""EAGLE-3's head: the target's features from a low, a middle and a high layer, fused, and a head trained on its
own unrolled drafts (training-time test, engines/training/ttt.py).

Why several layers: the last layer's feature is made to predict the *next* token only; a low and a middle layer
still carry what the later positions need, so EAGLE-3 reads three and concatenates them (3d) before one linear
map to d. Why an output norm: trained by training-time test, the head's output is no longer asked to equal any
target feature (only its tokens are scored), so it is normed before the shared LM head reads it and before it
is fed back as the next step's feature, keeping the step's input at the scale the fusion writes.

Everything else is :class:`engines.drafters.heads.EagleHead`'s: (embedding of token t+1, feature) → ``fc`` →
one decoder layer, the target's frozen LM head on a draft vocabulary, so the drafters, trees and the native
step serve it unchanged. Its card says ``architecture: eagle3`` and ``feature_layers``; a card without them is
the EAGLE head it always was.
"""

from __future__ import annotations

import torch
from torch import nn

from engines.drafters.heads import EagleHead, _norm_like
from engines.model.layers import LayerStack


def default_feature_layers(n_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's choice, as hidden states after layers (2, L/2, L−3): low, middle and high."""
    return (min(2, n_layers), max(1, n_layers // 2), max(1, n_layers - 3))


def check_feature_layers(layers: tuple[int, ...], n_layers: int) -> tuple[int, ...]:
    """``layers`` as a tuple of three distinct layers in [1, n_layers], low to high; ValueError naming it else."""
    layers = tuple(int(layer) for layer in layers)
    if len(layers) != 3 or len(set(layers)) != 3 or not all(1 <= layer <= n_layers for layer in layers):
        raise ValueError(f"feature_layers must be three distinct layers in [1, {n_layers}], got {list(layers)}")
    return tuple(sorted(layers))


def copy_checked(state: dict[str, torch.Tensor], wanted: dict[str, torch.Tensor], what: str) -> None:
    """Each tensor of ``wanted`` (a module's own, by name) filled from ``state``; ValueError naming ``what`` and the
    first names missing or of another shape, before anything is copied."""
    wrong = sorted(k for k, v in wanted.items() if k not in state or state[k].shape != v.shape)
    if wrong:
        raise ValueError(f"{what} lacks or misshapes {wrong[:3]} ({len(wrong)} of {len(wanted)} tensors)")
    with torch.no_grad():
        for name, tensor in wanted.items():
            tensor.copy_(state[name])


class Eagle3Head(EagleHead):
    architecture = "eagle3"

    def __init__(self, stack: LayerStack, vocab_ids: torch.Tensor, feature_layers: tuple[int, ...] | None = None):
        super().__init__(stack, vocab_ids)
        self.feature_layers = check_feature_layers(feature_layers or default_feature_layers(stack.n_layers),
                                                   stack.n_layers)
        d = stack.config.hidden_size
        # each layer's residual stream normed first: SmolLM2's has a few very large dimensions, and the three
        # layers' scales differ by orders of magnitude
        self.layer_norms = nn.ModuleList(_norm_like(stack) for _ in self.feature_layers)
        self.combine = nn.Linear(3 * d, d, bias=False)
        with torch.no_grad():  # start from the high layer's normed feature alone (the EAGLE head's input)
            self.combine.weight.zero_()
            self.combine.weight[:, 2 * d:] = torch.eye(d)
        self.out_norm = _norm_like(stack)

    def output_feature(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.out_norm(hidden)

    def start_from(self, eagle_state: dict[str, torch.Tensor]) -> None:
        """Begin where a trained EAGLE head is (its ``fc`` and decoder layer), so a short run refines that head
        instead of learning a layer from the target's copy. Why it starts equal to it: with the last layer as the
        high feature (its norm is the final norm the EAGLE head reads through) and the fusion passing that layer
        alone, the first draft's input is the EAGLE head's; the output norm, set to ones, only rescales the
        logits, so the first draft's argmax is the EAGLE head's too. A state that holds a fusion (``combine``) is
        an EAGLE-3 head's: training then continues it, every trained tensor taken as it is (its feature layers
        must be this head's: the recipe reads them off its card). ValueError if the high layer is not the
        last or the state is no EAGLE head of this shape."""
        if "combine.weight" in eagle_state:  # an EAGLE-3 head: every trained tensor as it is
            copy_checked(eagle_state, {k: v for k, v in self.state_dict().items()
                                       if k.startswith(("fc.", "layer.", "layer_norms.", "combine.", "out_norm."))},
                         "the EAGLE-3 head to continue")
            return
        last = self.stack.n_layers
        if self.feature_layers[2] != last:
            raise ValueError(f"feature_layers must end at the last layer ({last}) to start from an EAGLE head, "
                             f"got {list(self.feature_layers)}")
        wanted = {f"fc.{k}": v for k, v in self.fc.state_dict().items()}
        wanted.update({f"layer.{k}": v for k, v in self.layer.state_dict().items()})
        copy_checked(eagle_state, wanted, "the EAGLE head to start from")
        with torch.no_grad():
            self.out_norm.weight.fill_(1.0)

    @property
    def observe_layers(self) -> tuple[int, ...]:
        return self.feature_layers

    def observed_rows(self, seen: dict, n_valid: int) -> torch.Tensor:
        """The three layers' raw hidden states side by side, ``[1, n, 3d]`` (3E values a token on a link)."""
        return torch.cat([seen[layer][:, :n_valid] for layer in self.feature_layers], dim=-1)

    def target_feature(self, rows: torch.Tensor) -> torch.Tensor:
        """Each layer normed, then the linear fusion to d: ``[…, 3d]`` → ``[…, d]``."""
        dtype = next(self.parameters()).dtype
        parts = rows.to(dtype).chunk(3, dim=-1)
        normed = torch.cat([norm(part) for norm, part in zip(self.layer_norms, parts)], dim=-1)
        return self.linear(self.combine, normed)


def eagle_head(card: dict, stack: LayerStack, vocab_ids: torch.Tensor) -> EagleHead:
    """The head a card describes: ``architecture`` eagle3 (with its ``feature_layers``) or the EAGLE head."""
    architecture = card.get("architecture", "eagle1")
    if architecture == "eagle3":
        return Eagle3Head(stack, vocab_ids, tuple(card["feature_layers"]))
    if architecture != "eagle1":
        raise ValueError(f"eagle card architecture must be eagle1 or eagle3, got {architecture!r}")
    return EagleHead(stack, vocab_ids)
