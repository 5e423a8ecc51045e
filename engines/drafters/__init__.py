"""Drafters propose tokens; methods verify them. See :mod:`engines.drafters.base`."""

from .base import Draft, Drafter
from .eagle import EagleDrafter
from .early_exit import EarlyExitDrafter
from .model_draft import ModelDrafter
from .prompt_lookup import PromptLookupDrafter, lookup
from .streaming import StreamingDrafter

__all__ = ["Draft", "Drafter", "EagleDrafter", "EarlyExitDrafter", "ModelDrafter", "PromptLookupDrafter",
           "StreamingDrafter", "lookup"]
