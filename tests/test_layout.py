"""The import directions the layout promises (training/__init__.py and each package's
docstring): the service never needs PyTorch or the training code, the model needs
neither the training code nor the service, and each training room stays in its lane.

Read from the source (every ``import`` / ``from`` statement, at any depth, including
the ones inside functions), so a lazy import cannot slip past.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# package -> top-level modules (or dotted prefixes) it must never import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "service": ("torch", "training", "model", "sklearn", "pandas", "onnx"),
    "model": ("training", "service"),
    "training/data": ("torch", "model", "training.pretrain", "training.evaluate",
                      "training.bench", "training.demo", "training.export", "service"),
    "training/pretrain": ("training.evaluate", "training.bench", "training.demo",
                          "training.export", "service"),
    "training/evaluate": ("training.bench", "training.demo", "training.export", "service"),
}  # fmt: skip


def imported_names(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            # `from training import pretrain` imports training.pretrain
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def _hits(name: str, banned: tuple[str, ...]) -> list[str]:
    return [b for b in banned if name == b or name.startswith(b + ".")]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_import_directions(package: str) -> None:
    files = sorted((REPO / package).rglob("*.py"))
    assert files, f"no sources under {package}/"
    bad = [
        f"{f.relative_to(REPO)}:{line} imports {name} ({', '.join(hits)} is off limits)"
        for f in files
        for line, name in imported_names(f)
        if (hits := _hits(name, FORBIDDEN[package]))
    ]
    assert not bad, "\n".join(bad)


def test_the_manifest_contract_is_torch_free() -> None:
    """Training writes the artifact through service.manifest: that module (and the
    service package it sits in) must import without PyTorch."""
    names = {n for _, n in imported_names(REPO / "service" / "manifest.py")}
    assert not {n for n in names if n.split(".")[0] in ("torch", "training", "model")}


def test_the_checker_sees_lazy_imports(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("def f():\n    import torch.nn\n    from training import export\n")
    names = [n for _, n in imported_names(src)]
    assert _hits(names[0], ("torch",)) == ["torch"]
    assert "training.export" in names
