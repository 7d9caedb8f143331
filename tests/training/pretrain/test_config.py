"""Every config value is checked against its field's type and range (config.RULES),
from a YAML file or --set, with a one-line error naming the key and what it takes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from training.cli import main
from training.errors import UserError
from training.pretrain.config import RULES, TrainConfig, load_config

REPO = Path(__file__).resolve().parents[3]


def test_every_field_has_a_rule() -> None:
    fields = {
        f"{s.name}.{f.name}"
        for s in dataclasses.fields(TrainConfig)
        for f in dataclasses.fields(getattr(TrainConfig(), s.name))
    }
    assert set(RULES) == fields


def test_the_presets_and_defaults_pass() -> None:
    for preset in sorted((REPO / "configs").glob("*.yaml")):
        load_config(preset)
    load_config(None)


@pytest.mark.parametrize(
    ("item", "allowed"),
    [
        # tracebacks before
        ("optim.lr=-1e-3", "a number >= 0"),
        ("optim.weight_decay=-1", "a number >= 0"),
        ("optim.epochs=2.5", "an integer >= 1"),
        ("optim.batch_size=0", "an integer >= 1"),
        ("model.n_codes=0", "an integer >= 2"),
        ("model.d_model=0", "an integer >= 1"),
        ("model.patch_len=0", "an integer >= 1"),
        ("model.dropout=2", "a number >= 0 and < 1"),
        ("model.tau=0", "a number > 0"),
        ("run.device=gpu", "one of auto, cpu, cuda or cuda:N"),
        ("run.device=5", "one of auto, cpu, cuda or cuda:N"),
        ("run.threads=-1", "an integer >= 0"),
        ("run.seed=1.5", "an integer >= 0"),
        # silently accepted before
        ("optim.epochs=0", "an integer >= 1"),
        ("optim.epochs=-1", "an integer >= 1"),
        ("optim.batch_size=-4", "an integer >= 1"),
        ("optim.ema=1.5", "a number >= 0 and <= 1"),
        ("optim.grad_clip=-1", "a number > 0"),
        ("data.val_frac=1.5", "a number > 0 and < 1"),
        ("data.val_frac=0", "a number > 0 and < 1"),
        ("optim.patience=0", "an integer >= 1"),
        ("optim.epochs=true", "an integer >= 1"),
        ("model.n_codes=1", "an integer >= 2"),
        ("loss.kl=1", "true or false"),
        ("optim.lr=.nan", "a number >= 0"),
        ("loss.rec_scale=units", "one of raw, window"),
    ],
)
def test_a_bad_value_names_its_key_and_range(item: str, allowed: str) -> None:
    key = item.partition("=")[0]
    with pytest.raises(UserError) as e:
        load_config(REPO / "configs/fast.yaml", [item])
    msg = str(e.value)
    assert f"{key}=" in msg and msg.endswith(f"allowed: {allowed}"), msg


@pytest.mark.parametrize(
    "item",
    ["optim.lr=0", "optim.ema=1", "model.dropout=0", "run.device=cuda:1",
     "data.val_frac=0.5", "optim.lr=1", "run.threads=0", "optim.max_steps=0"],
)  # fmt: skip
def test_values_at_the_edges_pass(item: str) -> None:
    key, _, value = item.partition("=")
    section, _, name = key.partition(".")
    got = getattr(getattr(load_config(None, [item]), section), name)
    assert got == (value if section == "run" and name == "device" else float(value))


def test_window_and_seq_len_agree() -> None:
    with pytest.raises(UserError, match=r"data\.window=50 but model\.seq_len=100"):
        load_config(None, ["data.window=50"])
    cfg = load_config(
        None, ["data.window=50", "model.seq_len=50", "model.patch_len=10"]
    )
    assert cfg.model.n_patches == 5


def test_cli_bad_value_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["pretrain", "--dataset", "synthetic", "--out", str(tmp_path / "x")]
    assert main([*args, "--set", "model.tau=0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.tau=0 is out of range" in err
    assert not (tmp_path / "x").exists()


def test_a_preset_is_found_from_any_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`scjepa pretrain` run outside the checkout: its default (configs/paper.yaml)
    and a preset by name load the shipped files; a path elsewhere is not taken for a
    preset, and a missing file names the presets."""
    shipped = load_config(REPO / "configs" / "improved.yaml")
    monkeypatch.chdir(tmp_path)
    assert load_config("configs/paper.yaml") == load_config("paper.yaml")
    assert load_config("improved") == shipped
    (tmp_path / "paper.yaml").write_text("optim:\n  epochs: 3\n")
    assert load_config("paper.yaml").optim.epochs == 3  # the file given wins
    with pytest.raises(UserError, match=r"elsewhere/paper.yaml: config file not "
                       r"found \(a file, or a preset: fast, improved, paper\)"):  # fmt: skip
        load_config("elsewhere/paper.yaml")
