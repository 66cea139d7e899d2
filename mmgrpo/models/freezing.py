"""Which of the policy's parameters train: ``model.freeze_vision_tower`` / ``freeze_projector`` and the
``model.frozen`` / ``model.trainable`` name globs, resolved against the loaded model.

Frozen parameters get ``requires_grad=False`` before a back end builds its optimizer, so they get no
gradients and no optimizer state on any back end. Names are the plain model's as transformers names
them in memory (``named_parameters``, tied aliases included: a tensor is frozen under all its names or
none, trainable when any of its names is); globs are ``fnmatch`` patterns whose ``*`` also matches dots.
A glob matching nothing is an error, so a typo never silently trains everything.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from mmgrpo.config.errors import ConfigError
from mmgrpo.config.schema import ModelConfig
from mmgrpo.models.adapters import adapter_for, unwrap_model


@dataclass(frozen=True)
class FrozenParts:
    """The frozen parameter names of a model and why each group is frozen (for the log)."""

    names: frozenset[str]
    reasons: tuple[str, ...]

    def owner_modules(self) -> set[str]:
        """The modules that own a frozen parameter directly (its name minus the last part)."""
        return {name.rpartition(".")[0] for name in self.names}


def frozen_parts(model: torch.nn.Module, options: ModelConfig) -> FrozenParts:
    """The parameters ``options`` freezes in ``model`` (a plain or PEFT-wrapped policy)."""
    base = unwrap_model(model)
    aliases = _aliases(base)
    names = list(aliases)
    frozen, reasons = _family_parts(base, names, options)
    frozen |= _matching(names, options.frozen, "model.frozen")
    reasons += [f"model.frozen {pattern}" for pattern in options.frozen]
    frozen = {alias for name in frozen for alias in aliases[name]}
    if options.trainable:
        kept = {alias for name in _matching(names, options.trainable, "model.trainable") for alias in aliases[name]}
        frozen |= set(names) - kept
        reasons.append(f"all but model.trainable {list(options.trainable)}")
    if frozen and frozen >= set(names):
        raise ConfigError("model.freeze_* / frozen / trainable freeze every parameter: nothing is left to train")
    return FrozenParts(frozenset(frozen), tuple(reasons))


def _family_parts(model: torch.nn.Module, names: Sequence[str], options: ModelConfig) -> tuple[set[str], list[str]]:
    """The tower and projector names ``model.freeze_vision_tower`` / ``freeze_projector`` freeze, as the
    family's adapter names them, and the reasons for the log."""
    adapter, family = adapter_for(model), model.config.model_type
    frozen: set[str] = set()
    reasons: list[str] = []
    if (options.freeze_vision_tower or options.freeze_projector) and not adapter.tower_prefixes:
        raise ConfigError(
            f"model.freeze_vision_tower / freeze_projector: the {family!r} family's adapter names no media "
            "tower or projector (mmgrpo/models/adapters/); freeze its modules with model.frozen globs instead"
        )
    if options.freeze_vision_tower:
        tower = [n for n in names if _starts(n, adapter.tower_prefixes) and not _starts(n, adapter.projector_prefixes)]
        frozen |= _required(tower, f"the {family} tower {adapter.tower_prefixes}")
        reasons.append(f"tower {', '.join(adapter.tower_prefixes)} (projector excepted)")
    if options.freeze_projector:
        projector = [n for n in names if _starts(n, adapter.projector_prefixes)]
        frozen |= _required(projector, f"the {family} projector {adapter.projector_prefixes}")
        reasons.append(f"projector {', '.join(p for p in adapter.projector_prefixes if _starts_any(names, p))}")
    return frozen, reasons


def freeze(model: torch.nn.Module, parts: FrozenParts) -> None:
    """Switch gradients off for ``parts`` of the plain ``model`` (before an optimizer or back end sees it)."""
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if name in parts.names:
            parameter.requires_grad_(False)


def lora_excluded_modules(parts: FrozenParts, target_modules: Sequence[str]) -> list[str]:
    """Modules ``lora.target_modules`` would adapt (PEFT's rule: the name or its last parts) that own a frozen
    parameter: LoRA leaves them out, so a frozen part stays exactly as loaded."""
    return sorted(
        module for module in parts.owner_modules()
        if any(module == target or module.endswith(f".{target}") for target in target_modules)
    )


def unchanging_weights(model: torch.nn.Module) -> frozenset[str]:
    """The weights (plain names) no update changes, which a rollout engine's weight push may leave out once the engine
    holds every weight: gradients off (frozen parts; under LoRA every base weight but a LoRA layer's, which a push
    merges with its adapters), and only where the module's parent owns such weights only, so that sibling projections
    an engine fuses into one layer (q/k/v, gate/up) are sent all together or not at all (vLLM rebuilds a layer from
    what it is sent, and a partly sent layer would lose the rest). Empty for a model with nothing to train (an
    inference copy not marked by :func:`mark_unchanging`): what changes is not known."""
    changing: set[str] = set()
    fixed: set[str] = set()
    if not any(parameter.requires_grad for parameter in model.parameters()):
        return frozenset()
    for name, parameter in unwrap_model(model).named_parameters(remove_duplicate=False):
        if ".lora_" in name:
            continue
        merged = name.endswith(".base_layer.weight")
        (changing if parameter.requires_grad or merged else fixed).add(name.replace(".base_layer.", "."))
    fixed -= changing
    groups_changing = {_sibling_group(name) for name in changing}
    return frozenset(name for name in fixed if _sibling_group(name) not in groups_changing)


def mark_unchanging(copy: torch.nn.Module, unchanging: frozenset[str]) -> None:
    """Mark an inference copy of a policy (the rollout worker's) as its trainer: gradients off on ``unchanging`` (the
    trainer's :func:`unchanging_weights`), on elsewhere, so that the copy's own ``unchanging_weights`` are those and
    an engine around it leaves them out of its pushes as the trainer's engines do. Nothing differentiates the copy."""
    for name, parameter in copy.named_parameters(remove_duplicate=False):
        parameter.requires_grad_(name not in unchanging)


def _sibling_group(name: str) -> str:
    """``a.b.q_proj.weight`` -> ``a.b``: the parent of the module that owns the parameter."""
    return name.rsplit(".", 2)[0]


def parameter_counts(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, frozen) parameter counts of ``model``, each shared tensor counted once."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters()) - trainable


def _aliases(model: torch.nn.Module) -> dict[str, tuple[str, ...]]:
    """Every parameter name of ``model`` (PEFT's wrapped layers under their plain names, adapters left out)
    -> all the names of the same tensor (more than one where weights are tied)."""
    by_tensor: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if ".lora_" not in name:
            by_tensor.setdefault(id(parameter), []).append(name.replace(".base_layer.", "."))
    return {name: tuple(names) for names in by_tensor.values() for name in names}


def _starts(name: str, prefixes: Iterable[str]) -> bool:
    return any(name.startswith(prefix) for prefix in prefixes)


def _starts_any(names: Iterable[str], prefix: str) -> bool:
    return any(name.startswith(prefix) for name in names)


def _required(names: list[str], what: str) -> set[str]:
    if not names:
        raise ConfigError(f"{what} matches no parameter of this model: is it another version of the family?")
    return set(names)


def _matching(names: Sequence[str], patterns: Sequence[str], key: str) -> set[str]:
    """The names matching any of ``patterns``; a pattern matching none is an error naming it."""
    matched: set[str] = set()
    for pattern in patterns:
        hits = fnmatch.filter(names, pattern)
        if not hits:
            raise ConfigError(
                f"{key} pattern {pattern!r} matches no parameter of the model (names look like "
                f"{names[0]!r}; * matches dots too)"
            )
        matched.update(hits)
    return matched
