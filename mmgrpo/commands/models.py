"""``mmgrpo models``: build tiny random checkpoints (``make-tiny``) or list their families.

``mmgrpo models make-tiny --family qwen2_5_vl --out DIR [--seed S] [--vllm-cpu] [--shape qwen2_5_vl_3b]
[--set hidden_size=128 ...]``
writes a checkpoint that loads with ``load_model_and_processor`` or plain transformers.
``mmgrpo models list`` prints the families and the options ``--set`` accepts.
"""

from __future__ import annotations

import argparse
import dataclasses


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    make = actions.add_parser("make-tiny", help="build a tiny randomly initialised model of one family")
    make.add_argument("--family", required=True, help="tiny model family (see `mmgrpo models list`)")
    make.add_argument("--out", required=True, help="directory to save the checkpoint in")
    make.add_argument("--seed", type=int, default=0, help="weight initialisation seed (default 0)")
    make.add_argument(
        "--vllm-cpu", action="store_true",
        help="sizes vLLM's CPU build accepts: head_dim 32, a 30-second audio window (--set still overrides)",
    )
    make.add_argument(
        "--shape", metavar="NAME",
        help="a real checkpoint's widths, vocabulary and image budget with 2 layers (see `mmgrpo models list`; "
        "--set still overrides)",
    )
    make.add_argument(
        "--set",
        dest="options",
        action="append",
        default=[],
        metavar="NAME=INT",
        help="override a size or budget, e.g. --set hidden_size=128 (repeatable)",
    )
    actions.add_parser("list", help="list tiny model families and their options")


def run(args: argparse.Namespace) -> int:
    from mmgrpo.models.tiny import TINY_FAMILIES, VLLM_CPU_TINY_OPTIONS, TinySpec, make_tiny
    from mmgrpo.models.tiny.families import REAL_SHAPES

    if args.action == "list":
        print("families:", ", ".join(TINY_FAMILIES.names()))
        print("options (--set NAME=INT):")
        for field in dataclasses.fields(TinySpec):
            print(f"  {field.name} = {field.default}")
        print("shapes (--shape NAME):", ", ".join(sorted(REAL_SHAPES)))
        return 0
    if args.shape is not None and args.shape not in REAL_SHAPES:
        raise ValueError(f"unknown --shape {args.shape!r}; known: {', '.join(sorted(REAL_SHAPES))}")
    shape = REAL_SHAPES[args.shape] if args.shape else {}
    options = shape | (VLLM_CPU_TINY_OPTIONS if args.vllm_cpu else {}) | parse_options(args.options)
    out = make_tiny(args.family, args.out, seed=args.seed, **options)
    print(f"saved tiny {args.family} (seed {args.seed}) to {out}")
    return 0


def parse_options(pairs: list[str]) -> dict[str, int]:
    """``["hidden_size=128"]`` -> ``{"hidden_size": 128}``; a malformed pair raises ValueError."""
    options = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not value.lstrip("-").isdigit():
            raise ValueError(f"--set expects NAME=INT, got {pair!r}")
        options[name] = int(value)
    return options
