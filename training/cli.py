"""`scjepa`: the project's one command line.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; only the chosen one is imported, so ``scjepa serve`` works in the
service image, which has no PyTorch.

    scjepa data stats --dataset msl --root ~/.cache/scjepa/datasets
    scjepa <command> --help      (every option with its default)
    scjepa --version

Off a terminal (output redirected to a log), progress bars redraw at most every 30 s
(``TQDM_MININTERVAL``, unless set), so a log gets a few lines, not thousands.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from training.errors import UserError

# name -> (module, one-line help). Later issues add their commands here.
COMMANDS: dict[str, tuple[str, str]] = {
    "data": ("training.data.cli", "inspect benchmark data: loaders, windows, splits"),
    "evaluate": (
        "training.evaluate.protocol",
        "anomaly-prediction protocol: probes, baselines, seeds, report",
    ),
    "skab-protocol": (
        "training.evaluate.skab_protocol",
        "SKAB's own protocol: each run's first 400 rows as its reference, F1 pooled",
    ),
    "report": (
        "training.evaluate.report",
        "merge evaluation results into one markdown table",
    ),
    "pretrain": (
        "training.pretrain.train",
        "self-supervised SC-JEPA pre-training (DDP-ready)",
    ),
    "bench": (
        "training.bench.cli",
        "throughput and memory: bench train | infer | serve | soak | streams | cv",
    ),
    "calibrate": (
        "training.calibrate",
        "a label-free probe for data without incident labels: how rare each window is",
    ),
    "export": (
        "training.export",
        "write the ONNX model artifact + manifest for the service",
    ),
    "serve": (
        "service.cli",
        "run the risk service (FastAPI + onnxruntime, no PyTorch)",
    ),
    "label": (
        "training.label",
        "label a CSV of readings with the incidents reported (GET /incidents)",
    ),
    "replay": (
        "training.demo.replay",
        "stream a CSV or benchmark series through /ingest",
    ),
    "demo": (
        "training.demo.demo",
        "run the main job end to end on an embedded default",
    ),
}


class HelpFormatter(
    argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter
):
    """Every option's default in its help line, unless the help already says it (or
    there is none: None, False); descriptions as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            not action.option_strings
            or action.default in (None, False, argparse.SUPPRESS)
            or "default" in text.lower()
        ):
            return text
        return f"{text} (default: %(default)s)".lstrip()


def use_help_formatter(parser: argparse.ArgumentParser) -> None:
    """:class:`HelpFormatter` for ``parser`` and its sub-commands; an option without
    a help text still gets a line with its default."""
    parser.formatter_class = HelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                use_help_formatter(sub)
        elif action.help is None and action.default not in (None, False):
            action.help = "default: %(default)s"


def package_version() -> str:
    try:
        return version("scjepa")
    except PackageNotFoundError:  # run from a checkout without `pip install -e .`
        return "unknown (not installed)"


def _top_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scjepa",
        description="SC-JEPA anomaly prediction: data, training, export, serving.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n"
        + "\n".join(f"  {n:<10} {h}" for n, (_, h) in COMMANDS.items())
        + "\n\nRun `scjepa <command> --help` for a command's options.",
    )
    p.add_argument("command", choices=sorted(COMMANDS), metavar="command")
    p.add_argument("--version", action="version", version=package_version())
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    top = _top_parser()
    if not argv or argv[0] in ("-h", "--help"):
        top.print_help()
        return 0
    if argv[0] == "--version":
        print(f"scjepa {package_version()}")
        return 0
    name = argv[0]
    if name not in COMMANDS:
        top.error(f"unknown command {name!r} (choose from {', '.join(COMMANDS)})")
    module_name, help_line = COMMANDS[name]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"scjepa {name}", description=help_line)
    module.add_arguments(parser)
    use_help_formatter(parser)
    args = parser.parse_args(argv[1:])
    if not sys.stderr.isatty():
        os.environ.setdefault("TQDM_MININTERVAL", "30")
    try:
        code = int(module.run(args) or 0)
        sys.stdout.flush()  # a reader gone shows here, not at exit
        return code
    except UserError as e:
        print(f"scjepa {name}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """stdout's reader went away (``scjepa data stats ... | head``): exit quietly, as
    a command killed by SIGPIPE does (141), rather than with a traceback. stdout now
    points at /dev/null, so that Python's flush at exit does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141


if __name__ == "__main__":
    sys.exit(main())
