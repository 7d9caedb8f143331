"""`scjepa`: the project's one command line.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; only the chosen one is imported, so ``scjepa serve`` works in the
service image, which has no PyTorch.

    scjepa data stats --dataset msl --root ~/.cache/scjepa/datasets
    scjepa <command> --help
"""

from __future__ import annotations

import argparse
import importlib
import sys

from training.errors import UserError

# name -> (module, one-line help). Later issues add their commands here.
COMMANDS: dict[str, tuple[str, str]] = {
    "data": ("training.data.cli", "inspect benchmark data: loaders, windows, splits"),
    "evaluate": (
        "training.evaluate.protocol",
        "anomaly-prediction protocol: probes, baselines, seeds, report",
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
        "throughput and memory: bench train | infer | serve | soak | streams",
    ),
    "export": (
        "training.export",
        "write the ONNX model artifact + manifest for the service",
    ),
    "serve": (
        "service.cli",
        "run the risk service (FastAPI + onnxruntime, no PyTorch)",
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
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    top = _top_parser()
    if not argv or argv[0] in ("-h", "--help"):
        top.print_help()
        return 0
    name = argv[0]
    if name not in COMMANDS:
        top.error(f"unknown command {name!r} (choose from {', '.join(COMMANDS)})")
    module_name, help_line = COMMANDS[name]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"scjepa {name}", description=help_line)
    module.add_arguments(parser)
    args = parser.parse_args(argv[1:])
    try:
        return int(module.run(args) or 0)
    except UserError as e:
        print(f"scjepa {name}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
