"""Drafters propose tokens; methods verify them. See :mod:`engines.drafters.base`."""

from engines.drafters.base import Draft, Drafter
from engines.drafters.eagle import EagleDrafter
from engines.drafters.early_exit import EarlyExitDrafter
from engines.drafters.model_draft import ModelDrafter
from engines.drafters.prompt_lookup import PromptLookupDrafter, lookup
from engines.drafters.streaming import StreamingDrafter

__all__ = ["Draft", "Drafter", "EagleDrafter", "EarlyExitDrafter", "ModelDrafter", "PromptLookupDrafter",
           "StreamingDrafter", "lookup"]
