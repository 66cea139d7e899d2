"""On-disk preprocessing cache: each prompt's processed media and token ids, reused across steps,
epochs, stages and runs.

Encoding a prompt decodes and resizes its media, runs the family's image / video / audio
processor and tokenizes the text with its media placeholders expanded. A cold-start SFT
stage repeats that for the same examples at every pass, each GRPO epoch for the whole
dataset, and a second run for everything. The cache keeps what the batch builder makes of
one prompt (:class:`~mmgrpo.models.batch.EncodedRow`: pixel tensors / video frames / audio
features, input ids whose media tokens are the token count) under a key that changes
whenever that output could:

- the content hash of every media item (file bytes, not paths: a moved dataset still hits);
- the budgets of the prompt's modalities, and the video decoder for video files;
- the messages' text and the tools' schemas, the model family, the processor's configuration, tokenizer
  vocabulary and chat template;
- the transformers version and the source of the code that loads and encodes media.

An entry is one safetensors file written under a temporary name and renamed into place,
so concurrent readers (ranks, sweep trials, runs) see a whole entry or none; an entry that
does not read is a miss and is removed. A hit refreshes the file's modification time; when
the folder outgrows ``max_bytes`` the least recently used entries are removed until it is
under ``EVICT_TO`` of the cap (each process counts its own writes between scans of the
folder, so concurrent writers can overshoot the cap briefly).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import json
import logging
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import safetensors.torch
import torch
import transformers
from transformers import ProcessorMixin

from mmgrpo.models import adapters, batch
from mmgrpo.models.batch import EncodedRow, MediaBudgets
from mmgrpo.types import Sample
from processors import MODALITIES, fingerprint, video_backends
from processors.fingerprint import FileDigests, media_fingerprint

if TYPE_CHECKING:
    from mmgrpo.config import Config

logger = logging.getLogger(__name__)

CACHE_FORMAT = 1  # bump when the entry layout changes
EVICT_TO = 0.8  # eviction stops once the folder is this fraction of the cap
ENTRY_SUFFIX = ".safetensors"
DEFAULT_DIR_ENV = "MMGRPO_CACHE_DIR"
_INPUT_IDS, _TOKEN, _MEDIA, _COUNT = "input_ids", "token.", "media.", "count."
# Modules whose code decides what a prompt encodes to: their source is part of every key.
_ENCODING_MODULES = (batch, adapters, fingerprint, video_backends)
# model.dtype -> the dtype media tensors are stored in: a 16-bit model casts its pixels and features
# to its own dtype on entry, so storing them so halves the cache and changes no forward.
_MEDIA_STORAGE_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def default_cache_dir() -> Path:
    """``$MMGRPO_CACHE_DIR``, else ``~/.cache/mmgrpo/prompts``."""
    return Path(os.environ.get(DEFAULT_DIR_ENV) or Path.home() / ".cache" / "mmgrpo" / "prompts")


def open_prompt_cache(config: Config) -> PromptCache | None:
    """The preprocessing cache the config's data section describes (media stored in the model's dtype
    when it is a 16-bit one); None when it is off."""
    data = config.data
    if not data.cache:
        return None
    return PromptCache(data.cache_dir or default_cache_dir(), max_bytes=int(data.cache_max_gb * 2**30),
                       media_dtype=_MEDIA_STORAGE_DTYPES.get(config.model.dtype))


def hit_rate_metrics(stats: CacheStats, prefix: str = "data") -> dict[str, float]:
    """``<prefix>/cache_hit_rate`` of the lookups ``stats`` counts (nothing when there were none)."""
    rate = stats.hit_rate()
    return {} if rate is None else {f"{prefix}/cache_hit_rate": rate}


@dataclass
class CacheStats:
    """Lookups since the cache was opened. ``uncacheable``: prompts whose media cannot be hashed."""

    hits: int = 0
    misses: int = 0
    uncacheable: int = 0
    stored: int = 0
    evicted: int = 0
    errors: int = 0  # unreadable entries and failed writes

    @property
    def lookups(self) -> int:
        return self.hits + self.misses + self.uncacheable

    def snapshot(self) -> CacheStats:
        """A copy of the counts now (they keep counting)."""
        return dataclasses.replace(self)

    def since(self, earlier: CacheStats) -> CacheStats:
        """The counts accumulated after ``earlier`` (a ``snapshot``)."""
        return CacheStats(**{
            name: getattr(self, name) - getattr(earlier, name) for name in dataclasses.asdict(self)
        })

    def hit_rate(self) -> float | None:
        """Hits per lookup; None before the first lookup."""
        return self.hits / self.lookups if self.lookups else None


class PromptCache:
    """Encoded prompt rows on disk under ``root``, at most ~``max_bytes`` of them.

    With ``media_dtype``, floating-point media tensors (pixels, frames, audio features) are stored
    in it: for a model of that dtype, which casts them on entry (a row read back is then in it,
    a freshly encoded one still float32). It is part of every key.
    """

    def __init__(self, root: str | os.PathLike, max_bytes: int, media_dtype: torch.dtype | None = None) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.media_dtype = media_dtype
        self.stats = CacheStats()
        self._file_digests = FileDigests()
        self._processors: dict[int, tuple[ProcessorMixin, str]] = {}  # id -> (processor kept alive, fingerprint)
        self._bytes: int | None = None  # folder size as this process knows it; None until scanned
        self._write_failed = False

    # -- keys ---------------------------------------------------------------------
    def key(self, processor: ProcessorMixin, sample: Sample, budgets: MediaBudgets, family: str) -> str | None:
        """The key of ``sample``'s encoding, or None (counted) when a media item cannot be hashed."""
        media = {}
        for name in MODALITIES:
            refs = sample.media(name)
            if not refs:
                continue
            hashes = [media_fingerprint(ref, self._file_digests) for ref in refs]
            if None in hashes:
                self.stats.uncacheable += 1
                return None
            modality = MODALITIES.get(name)
            budget = budgets.get(name) or modality.budget_type()
            media[name] = {"items": hashes, "budget": dataclasses.asdict(budget)}
            if name == "video":
                media[name]["decoder"] = video_backends.default_video_backend()
        described = {
            "processor": self._processor_fingerprint(processor),
            "family": family,
            "messages": _messages_without_media(sample.messages),
            "tools": sample.tools,
            "media": media,
            "media_dtype": str(self.media_dtype),
        }
        return hashlib.blake2b(json.dumps(described, sort_keys=True, default=str).encode(), digest_size=20).hexdigest()

    def _processor_fingerprint(self, processor: ProcessorMixin) -> str:
        known = self._processors.get(id(processor))
        if known is None:
            known = self._processors[id(processor)] = (processor, processor_fingerprint(processor))
        return known[1]

    # -- entries ------------------------------------------------------------------
    def get(self, key: str) -> EncodedRow | None:
        """The row stored under ``key``; None (a miss) when there is none or it does not read."""
        path = self._path(key)
        try:
            # Memory-mapped: the batch's concatenation is the one copy of the pixels.
            row = _row_from_tensors(safetensors.torch.load_file(path))
        except OSError as error:
            self.stats.misses += 1
            if not isinstance(error, FileNotFoundError):
                self.stats.errors += 1
            return None
        except Exception as error:  # a damaged entry (truncated, foreign): encode anew, never fail the batch
            return self._discard(path, error)
        self.stats.hits += 1
        with contextlib.suppress(OSError):
            os.utime(path)  # least recently used goes first
        return row

    def _discard(self, path: Path, error: Exception) -> None:
        """A miss for an entry that does not read: it is removed, so the next encoding replaces it."""
        logger.warning("preprocessing cache: removing unreadable entry %s (%s)", path, error)
        self.stats.errors += 1
        self.stats.misses += 1
        with contextlib.suppress(OSError):
            path.unlink()

    def put(self, key: str, row: EncodedRow) -> None:
        """Store ``row`` under ``key`` atomically; a failed write is logged once and counted, never raised."""
        tensors = _tensors_of_row(row)
        if tensors is None:
            return
        if self.media_dtype is not None:
            tensors = {name: value.to(self.media_dtype) if name.startswith(_MEDIA) and value.is_floating_point()
                       else value for name, value in tensors.items()}
        path = self._path(key)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            data = safetensors.torch.save(tensors)
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_bytes(data)
            os.replace(temporary, path)
        except OSError as error:
            with contextlib.suppress(OSError):
                temporary.unlink()
            self.stats.errors += 1
            if not self._write_failed:
                logger.warning("preprocessing cache: cannot write to %s (%s); prompts are encoded anew", self.root,
                               error)
                self._write_failed = True
            return
        self.stats.stored += 1
        self._bytes = (self._scan_size() if self._bytes is None else self._bytes) + len(data)
        if self._bytes > self.max_bytes:
            self.evict()

    def evict(self) -> None:
        """Remove least recently used entries until the folder is under ``EVICT_TO`` of the cap."""
        entries = sorted(self._entries(), key=lambda entry: entry[1])  # oldest first
        total = sum(size for _, _, size in entries)
        target = self.max_bytes * EVICT_TO
        for path, _, size in entries:
            if total <= target:
                break
            with contextlib.suppress(OSError):
                path.unlink()  # another process may have removed it first
                self.stats.evicted += 1
            total -= size
        self._bytes = total

    def size_bytes(self) -> int:
        """Bytes of entries in the folder now."""
        return self._scan_size()

    def _path(self, key: str) -> Path:
        return self.root / f"v{CACHE_FORMAT}" / key[:2] / f"{key}{ENTRY_SUFFIX}"

    def _scan_size(self) -> int:
        return sum(size for _, _, size in self._entries())

    def _entries(self) -> list[tuple[Path, float, int]]:
        """(path, modification time, bytes) of every entry."""
        entries = []
        for path in (self.root / f"v{CACHE_FORMAT}").glob(f"*/*{ENTRY_SUFFIX}"):
            with contextlib.suppress(OSError):
                stat = path.stat()
                entries.append((path, stat.st_mtime, stat.st_size))
        return entries


def processor_fingerprint(processor: ProcessorMixin) -> str:
    """Hash of everything in ``processor`` that shapes an encoded prompt, plus the encoding code."""
    tokenizer = getattr(processor, "tokenizer", processor)
    described = {
        "processor": processor.to_json_string() if hasattr(processor, "to_json_string") else repr(processor),
        "vocabulary": sorted(tokenizer.get_vocab().items()),
        "chat_template": getattr(processor, "chat_template", None) or getattr(tokenizer, "chat_template", None),
        "transformers": transformers.__version__,
        "code": _encoding_code_digest(),
        "format": CACHE_FORMAT,
    }
    return hashlib.blake2b(json.dumps(described, sort_keys=True, default=str).encode(), digest_size=20).hexdigest()


@functools.cache
def _encoding_code_digest() -> str:
    """Hash of the source of the modules that load, encode and split prompts (and of ``processors/``)."""
    digest = hashlib.blake2b(digest_size=16)
    sources = {Path(inspect.getfile(module)) for module in _ENCODING_MODULES}
    sources |= set(Path(inspect.getfile(fingerprint)).parent.glob("*.py"))
    for source in sorted(sources):
        digest.update(source.read_bytes())
    return digest.hexdigest()


def _messages_without_media(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each media reference replaced by its kind (the key hashes media by content)."""
    stripped = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = [
                {key: (kind if key == kind else value) for key, value in part.items()}
                if (kind := part.get("type")) in MODALITIES
                else part
                for part in content
            ]
        stripped.append({**message, "content": content})
    return stripped


def _tensors_of_row(row: EncodedRow) -> dict[str, torch.Tensor] | None:
    """The entry of ``row``; None when a media input is not a tensor (such rows are not stored)."""
    tensors = {_INPUT_IDS: row.input_ids}
    tensors |= {_TOKEN + key: value for key, value in row.token_inputs.items()}
    tensors |= {_MEDIA + key: value for key, value in row.media_inputs.items()}
    tensors |= {_COUNT + modality: torch.tensor(count) for modality, count in row.media_counts.items()}
    if not all(isinstance(value, torch.Tensor) for value in tensors.values()):
        return None
    return {key: value.contiguous() for key, value in tensors.items()}


def _row_from_tensors(tensors: Mapping[str, torch.Tensor]) -> EncodedRow:
    def with_prefix(prefix: str) -> dict[str, torch.Tensor]:
        return {key[len(prefix):]: value for key, value in tensors.items() if key.startswith(prefix)}

    return EncodedRow(
        input_ids=tensors[_INPUT_IDS],
        token_inputs=with_prefix(_TOKEN),
        media_inputs=with_prefix(_MEDIA),
        media_counts={modality: int(count) for modality, count in with_prefix(_COUNT).items()},
    )
