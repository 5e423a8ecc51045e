"""A KV cache the engine owns, so speculative methods can roll back, compact and fork it freely.

Storage is one preallocated ``[1, n_kv_heads, capacity, head_dim]`` pair per layer plus a length per
layer. Lengths are per layer because methods run layer ranges at different times: early-exit drafting
fills layers [0, ℓ) ahead of the deep layers, a pipeline stage owns only its own range.

It duck-types the one method Hugging Face attention calls on a cache, ``update(k, v, layer_idx)``,
which appends the new keys/values and returns everything cached so far for that layer.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, capacity: int,
                 dtype: torch.dtype, device: torch.device | str = "cpu", first_layer: int = 0):
        shape = (1, n_kv_heads, capacity, head_dim)
        self.first_layer = first_layer
        self.capacity = capacity
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.lengths = [0] * n_layers

    @classmethod
    def for_model(cls, config, capacity: int, dtype: torch.dtype, device, layers: range | None = None) -> "KVCache":
        layers = layers or range(config.num_hidden_layers)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(len(layers), config.num_key_value_heads, head_dim, capacity, dtype, device, layers.start)

    # --- what Hugging Face attention calls -------------------------------------------------------
    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *_args, **_kwargs):
        i = layer_idx - self.first_layer
        start, n = self.lengths[i], key.shape[-2]
        if start + n > self.capacity:
            raise RuntimeError(f"KV cache capacity {self.capacity} exceeded at layer {layer_idx}")
        self.keys[i][:, :, start:start + n] = key
        self.values[i][:, :, start:start + n] = value
        self.lengths[i] = start + n
        return self.keys[i][:, :, :start + n], self.values[i][:, :, :start + n]

    # --- what speculative methods need ------------------------------------------------------------
    def length(self, layer: int | None = None) -> int:
        return self.lengths[0 if layer is None else layer - self.first_layer]

    def crop(self, length: int, layers: range | None = None) -> None:
        """Forget everything after ``length`` tokens (rejected drafts)."""
        for i in self._indices(layers):
            self.lengths[i] = min(self.lengths[i], length)

    def keep(self, start: int, kept: list[int]) -> None:
        """Keep only the entries at ``start + kept[j]`` (a tree's accepted path), packed from ``start``."""
        if kept == list(range(len(kept))):  # a prefix (a chain's accepted drafts): nothing moves
            self.crop(start + len(kept))
            return
        index = torch.tensor([start + k for k in kept], device=self.keys[0].device)
        for i in range(len(self.keys)):
            if self.lengths[i] <= start:
                continue
            self.keys[i][:, :, start:start + len(kept)] = self.keys[i].index_select(2, index)
            self.values[i][:, :, start:start + len(kept)] = self.values[i].index_select(2, index)
            self.lengths[i] = start + len(kept)

    def fork(self) -> "KVCache":
        """An independent copy for a speculative branch (SSD, Mirror-SD pre-speculation)."""
        twin = object.__new__(KVCache)
        twin.first_layer, twin.capacity = self.first_layer, self.capacity
        twin.keys = [k.clone() for k in self.keys]
        twin.values = [v.clone() for v in self.values]
        twin.lengths = list(self.lengths)
        return twin

    def _indices(self, layers: range | None) -> range:
        if layers is None:
            return range(len(self.keys))
        return range(layers.start - self.first_layer, layers.stop - self.first_layer)
