"""Dataset adapters: public formats -> canonical rows. Importing registers the built-in ones."""

from data_recipes.adapters import chat, code, gsm8k, public  # noqa: F401  (registration)
from data_recipes.adapters.base import ADAPTERS, Adapter, BadRow, detect_adapter, register_adapter

__all__ = ["ADAPTERS", "Adapter", "BadRow", "detect_adapter", "register_adapter"]
