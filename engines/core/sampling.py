"""Turning logits into tokens: greedy, or temperature + nucleus (top-p) sampling.

Draft and target go through the same warpers, so the acceptance rule compares the two distributions
that actually produced and would have produced each token (the losslessness argument needs that).
"""

from __future__ import annotations

import math
import numbers

import torch

SEED_RANGE = (0, 2**64 - 1)  # what torch.Generator.manual_seed takes (a lane's seed wraps around inside it)
# the smallest temperature above 0: logits divided by less overflow fp32 to inf, and the softmax to NaN (sampling at
# it is already greedy in all but rounding: a logit gap of 0.01 becomes a factor of e^-100)
MIN_TEMPERATURE = 1e-4


def greedy_tokens(logits: torch.Tensor) -> list[int]:
    """Each row's argmax (the first of equal maxima, as ``torch.argmax`` picks) of logits ``[..., V]``, as ints.

    Why not ``torch.argmax``: on the CPU it took 80 µs a row of SmolLM2's 49k logits against 6 for NumPy's
    vectorised argmax (2-core Zen 4, fp32), and every greedy round takes one per verified row (4% of a
    suffix-drafted run). Other dtypes and devices keep torch's."""
    if logits.device.type == "cpu" and logits.dtype == torch.float32:
        return logits.detach().numpy().argmax(-1).tolist()
    return logits.argmax(-1).tolist()


TOP_CHUNK = 256  # top_indices' chunk: 192 chunk maxima for SmolLM2's 49,152 logits


def top_indices(values: torch.Tensor, k: int) -> list[int]:
    """The indices of the ``k`` largest entries of a 1-D tensor, largest first (ties in any order, as
    ``torch.topk`` leaves them).

    Why not ``torch.topk``: on the CPU it took 113–122 µs for the top 5 of 49k fp32 values, where the chunks'
    maxima take about 8 (2-core Zen 4); a trace's rejection view asks for that every refusing round. The k
    largest entries lie in the k chunks of the largest maxima (each such entry is at most its chunk's maximum and
    at least the k-th largest), so the top k of those chunks' entries are the answer."""
    n = values.shape[-1]
    k = min(k, n)
    if values.device.type != "cpu" or values.dim() != 1 or n < 16 * TOP_CHUNK or k > 16:
        return values.topk(k).indices.tolist()
    whole = n - n % TOP_CHUNK
    chunks = values[:whole].view(-1, TOP_CHUNK)
    picked = chunks.amax(1).topk(k).indices
    best = chunks[picked].reshape(-1).topk(k).indices.tolist()
    starts = (picked * TOP_CHUNK).tolist()
    found = [starts[i // TOP_CHUNK] + i % TOP_CHUNK for i in best]
    if whole == n:
        return found
    merged = found + list(range(whole, n))  # the ragged tail's entries are candidates too
    return [merged[i] for i in values[merged].topk(k).indices.tolist()]


def greedy_token(logits: torch.Tensor) -> int:
    """:func:`greedy_tokens` of one row ``[V]``."""
    return greedy_tokens(logits.reshape(1, -1))[0]


def _real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class Sampler:
    def __init__(self, temperature: float = 0.0, top_p: float = 1.0, seed: int | None = 0,
                 device: torch.device | str = "cpu"):
        if not _real(temperature) or not math.isfinite(temperature) or temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
        if 0 < temperature < MIN_TEMPERATURE:
            raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g} (below it the logits "
                             f"overflow), got {temperature!r}")
        if not _real(top_p) or not 0 < top_p <= 1:  # NaN fails the comparison too
            raise ValueError(f"top_p must be a number in (0, 1], got {top_p!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)
                                 or not SEED_RANGE[0] <= seed <= SEED_RANGE[1]):
            raise ValueError(f"seed must be None (a fresh random seed) or an integer in [0, 2**64 - 1], got {seed!r}")
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.seed = None if seed is None else int(seed)
        self.generator = torch.Generator(device=device)
        if seed is not None:
            self.generator.manual_seed(seed)
        else:
            self.generator.seed()

    def for_lane(self, lane: int) -> "Sampler":
        """The same warpers with a generator of the lane's own (seed + lane), so a parallel method draws the
        same numbers whichever process a lane runs in."""
        return Sampler(self.temperature, self.top_p, None if self.seed is None else (self.seed + lane) % 2**64,
                       self.generator.device)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Warped distributions ``[n, V]`` (one-hot argmax when greedy)."""
        if self.greedy:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
        probs = torch.softmax(logits / self.temperature, dim=-1)
        if self.top_p < 1:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            outside = sorted_probs.cumsum(-1) - sorted_probs >= self.top_p  # keep the smallest set reaching top_p
            sorted_probs = sorted_probs.masked_fill(outside, 0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
            probs = probs / probs.sum(-1, keepdim=True)
        return probs

    def draw(self, probs: torch.Tensor) -> int:
        """One token from a single distribution ``[V]``; drawn where the generator lives, so a seed gives
        the same random stream whichever device computed ``probs``."""
        return int(torch.multinomial(probs.to(self.generator.device, torch.float32), 1, generator=self.generator))

    def draw_by_cdf(self, probs: torch.Tensor) -> int:
        """The same law as :meth:`draw` (another random stream), by inverting the CDF at one uniform:
        ``torch.multinomial`` takes 0.8 ms per draw over SmolLM2's 49k tokens on CPU, more than a draft
        forward's share when a branch rollout draws dozens of tokens a round."""
        p = probs.to(self.generator.device, torch.float32)
        cdf = torch.cumsum(p, 0)
        u = torch.rand((), generator=self.generator, device=self.generator.device) * cdf[-1]
        index = int(torch.searchsorted(cdf, u, right=True))  # the first token whose cumulative mass exceeds u
        if index >= len(p) or float(p[index]) == 0.0:  # u rounded up to the total: the last token with mass
            index = int(torch.nonzero(p).max())
        return index

    def uniform(self) -> float:
        return float(torch.rand((), generator=self.generator))

    def uniforms(self, n: int) -> torch.Tensor:
        """``n`` uniforms at once (float32, where the generator lives: the CPU unless built elsewhere)."""
        return torch.rand(n, generator=self.generator, device=self.generator.device).cpu()

    def next_token(self, logits: torch.Tensor) -> int:
        """Token for one row of logits ``[V]``."""
        if self.greedy:
            return greedy_token(logits)
        return self.draw(self.probs(logits[None])[0])
