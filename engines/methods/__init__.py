"""Registry of decoding methods by name."""

from .ar import AR
from .base import Method, MethodConfig
from .cats import Cats
from .eagle import EagleTree
from .eesd import EarlyExitSelfSpeculation
from .pld import PromptLookup
from .mirror import Mirror
from .moa import MixtureOfAttentions
from .ppsd import Ppsd
from .sps import SpeculativeSampling
from .ssd import Ssd

METHODS: dict[str, type[Method]] = {m.name: m for m in (AR, SpeculativeSampling, PromptLookup, EarlyExitSelfSpeculation, EagleTree, Cats,
                                              Ppsd, Mirror, Ssd, MixtureOfAttentions)}


def get_method(name: str) -> type[Method]:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(METHODS)}")
    return METHODS[name]


__all__ = ["METHODS", "Method", "MethodConfig", "get_method"]
