"""Drafters propose tokens; methods verify them. See :mod:`engines.drafters.base`."""

from .base import Draft, Drafter
from .early_exit import EarlyExitDrafter
from .model_draft import ModelDrafter
from .prompt_lookup import PromptLookupDrafter, lookup

__all__ = ["Draft", "Drafter", "EarlyExitDrafter", "ModelDrafter", "PromptLookupDrafter", "lookup"]
