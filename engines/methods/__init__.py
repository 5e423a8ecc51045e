"""Registry of decoding methods by name."""

from engines.methods.ar import AR
from engines.methods.base import Method, MethodConfig
from engines.methods.cats import Cats
from engines.methods.eagle import EagleTree
from engines.methods.eesd import EarlyExitSelfSpeculation
from engines.methods.mirror import Mirror
from engines.methods.moa import MixtureOfAttentions
from engines.methods.pld import PromptLookup
from engines.methods.ppsd import Ppsd
from engines.methods.sps import SpeculativeSampling
from engines.methods.ssd import Ssd

METHODS: dict[str, type[Method]] = {m.name: m for m in (AR, SpeculativeSampling, PromptLookup, EarlyExitSelfSpeculation, EagleTree, Cats,
                                              Ppsd, Mirror, Ssd, MixtureOfAttentions)}


def get_method(name: str) -> type[Method]:
    if not isinstance(name, str) or name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(METHODS)}")
    return METHODS[name]


__all__ = ["METHODS", "Method", "MethodConfig", "get_method"]
