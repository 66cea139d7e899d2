"""The ``mmgrpo`` command line: a thin dispatcher over ``mmgrpo.commands.*``.

Each sub-command is one module exposing ``configure(parser)`` (adds its arguments)
and ``run(args) -> int`` (does the work). Heavy imports (torch, transformers) happen
inside ``run`` so that ``mmgrpo --help`` stays fast.

One convention for every command, argparse's: a problem with the user's inputs (a bad
argument, config key or value, a missing file, model or plugin, a bad dataset) is one line
``mmgrpo <command>: error: <what and where>`` on stderr (one line per problem when a config
has several) and exit status 2; a run that failed for a reason one line says
(``mmgrpo.failures.RunFailure``, e.g. a loss that became NaN, naming its rows) is the same
kind of line and exit status 1; Ctrl-C is 130 and SIGTERM 143 (``mmgrpo train``).
``--debug`` (before or after the command name) shows the traceback instead. Any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from mmgrpo.failures import RunFailure
from mmgrpo.registry import RegistryError

# name -> (module, one-line help). A new sub-command is one module plus one line here.
COMMANDS: dict[str, tuple[str, str]] = {
    "models": ("mmgrpo.commands.models", "Build tiny random checkpoints of each supported model family (make-tiny, list)."),
    "train": ("mmgrpo.commands.train", "Run GRPO training (no arguments: the embedded tiny default on CPU)."),
    "sft": ("mmgrpo.commands.sft", "Cold-start supervised fine-tuning with a completion-only loss."),
    "reject": ("mmgrpo.commands.reject", "Rejection sampling: keep the best sampled completions as SFT data."),
    "rollout-serve": (
        "mmgrpo.commands.rollout_serve", "Serve a model with vLLM for rollout.engine=vllm_server (sampling on other GPUs)."
    ),
    "eval": ("mmgrpo.commands.eval", "Benchmark models or checkpoints on tasks (greedy, pass@k) with reports and CIs."),
    "data": ("mmgrpo.commands.data", "Make a procedural dataset (clevr_count, grounding, video/audio counting) or inspect one."),
    "config": ("mmgrpo.commands.config", "Print the resolved config of a recipe + overrides, or describe every key."),
    "sweep": ("mmgrpo.commands.sweep", "Hyperparameter search over config keys (Optuna TPE, median pruning, resumable)."),
    "report": ("mmgrpo.commands.report", "Build a run's report.html (curves, sample gallery, evaluations), compare runs, or rebuild an eval's."),
    "task": ("mmgrpo.commands.task", "Write a new task package (new), or fuzz a task's rewards with hostile completions (check)."),
}

# Exceptions that describe a problem with the user's inputs, not a bug: one line each, no traceback.
# (ConfigError, ModelLoadError, MediaError and BadRow are ValueErrors; a failed plugin import is an ImportError.)
USER_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, ImportError, RegistryError)
DEBUG_FLAG = "--debug"
EXIT_FAILED = 1  # the run failed (RunFailure)
EXIT_USAGE = 2  # the user's inputs are wrong, as argparse exits
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mmgrpo",
        description="Train vision/video/audio-language models with GRPO, and evaluate them.",
    )
    from mmgrpo import __version__

    parser.add_argument("--version", action="version", version=f"mmgrpo {__version__}")
    parser.add_argument(
        DEBUG_FLAG, action="store_true", help="show the full traceback of an error instead of one line (anywhere on the line)"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        module = importlib.import_module(module_name)
        module.configure(sub)
        sub.set_defaults(_run=module.run, _parser=sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    # Taken out before parsing, so it works after any (sub-)sub-command and among overrides.
    debug = DEBUG_FLAG in argv
    args = _parse(parser, [arg for arg in argv if arg != DEBUG_FLAG])
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 0
    try:
        return int(args._run(args) or 0)
    except (RunFailure, *USER_ERRORS) as error:
        if debug:
            raise
        for problem in getattr(error, "problems", None) or [str(error)]:
            print(f"mmgrpo {args.command}: error: {problem}", file=sys.stderr)
        return EXIT_FAILED if isinstance(error, RunFailure) else EXIT_USAGE
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"mmgrpo {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse ``argv``; ``KEY=VALUE`` overrides may also follow a flag (``train r.yaml --resume seed=7``).

    argparse stops collecting a sub-command's positional overrides at its first flag, so the
    ones after it come back unrecognised; they are appended to the command's overrides.
    """
    args, extras = parser.parse_known_args(argv)
    overrides = [arg for arg in extras if "=" in arg and not arg.startswith("-")]
    if extras and (len(overrides) != len(extras) or not isinstance(getattr(args, "overrides", None), list)):
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extras)}")  # "mmgrpo <command>: error: ..."
    if overrides:
        args.overrides = [*args.overrides, *overrides]
    return args


if __name__ == "__main__":
    sys.exit(main())
