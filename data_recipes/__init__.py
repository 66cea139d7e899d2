"""How datasets are made or loaded.

- ``make_dataset`` runs a procedural recipe (``GENERATORS``: clevr_count, grounding,
  video_count, audio_count) into ``DIR/{train,test}.jsonl`` + ``DIR/media/``.
- ``load_rows`` reads a local file/folder or Hub id through an adapter (``ADAPTERS``) into
  checked canonical rows, skipping and counting bad rows.
- ``load_mixture`` combines several datasets with weights and tasks into one seeded stream.

Names are imported on first use: ``datasets`` takes seconds to import, and the CLI's
``--help`` should not pay for it.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> module defining it
_EXPORTS: dict[str, str] = {
    "ADAPTERS": "data_recipes.adapters",
    "BadRow": "data_recipes.adapters",
    "register_adapter": "data_recipes.adapters",
    "GENERATORS": "data_recipes.generators",
    "DatasetSpec": "data_recipes.loading",
    "LoadedRows": "data_recipes.loading",
    "SkippedRow": "data_recipes.loading",
    "load_rows": "data_recipes.loading",
    "make_dataset": "data_recipes.make",
    "Mixture": "data_recipes.mixture",
    "MixtureEntry": "data_recipes.mixture",
    "load_mixture": "data_recipes.mixture",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'data_recipes' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
