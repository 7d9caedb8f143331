"""`--resume` and the run directory: what a resumed run may change, the end of an
epoch as one unit (kill points), early-stopped runs, a folder that holds a run, and
checkpoints that load but do not fit."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from support.train_helpers import random_pairs, tiny_train_config

from model import SCJEPA
from training.cli import main
from training.data import Pairs
from training.errors import UserError
from training.pretrain import loop
from training.pretrain.checkpoint import load_checkpoint, load_model, save_checkpoint
from training.pretrain.ema import make_target
from training.pretrain.train import pretrain

REPO = Path(__file__).resolve().parents[3]
TINY = ["--set=model.d_model=16", "--set=model.n_layers=1", "--set=model.n_heads=2",
        "--set=model.n_codes=12", "--set=model.pred_dim=16", "--set=model.pred_layers=1",
        "--set=model.pred_heads=2", "--set=model.tok_channels=4",
        "--set=optim.batch_size=32", "--set=optim.select_from=1",
        "--set=run.threads=1", "--set=run.progress=false", "--set=run.device=cpu"]  # fmt: skip


@pytest.fixture(autouse=True)
def _threads() -> None:
    torch.set_num_threads(1)


def _cli(out: Path, *extra: str) -> list[str]:
    return ["pretrain", "--dataset", "synthetic", "--config",
            str(REPO / "configs/fast.yaml"), *TINY, "--out", str(out), *extra]  # fmt: skip


def _epochs(out: Path) -> list[int]:
    return [
        json.loads(x)["epoch"] for x in (out / "metrics.jsonl").read_text().splitlines()
    ]


def _same_weights(a: Path, b: Path) -> None:
    ca, cb = load_checkpoint(a), load_checkpoint(b)
    assert (ca["epoch"], ca["step"], ca["best"]) == (
        cb["epoch"],
        cb["step"],
        cb["best"],
    )
    for part in ("model", "target"):
        for k, v in ca[part].items():
            assert torch.equal(v, cb[part][k]), f"{a.name} {part}.{k}"


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished one-epoch run of 2 (random pairs, no data set's corpus)."""
    out = tmp_path_factory.mktemp("one") / "run"
    pretrain(
        tiny_train_config(optim={"epochs": 2, "max_steps": 5}), random_pairs(), out
    )
    return out


# -- B1: a resume refuses another config or data, naming what differs


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"optim": {"lr": 1e-2}}, "optim.lr 0.0005 -> 0.01"),
        ({"optim": {"weight_decay": 0.1}}, "optim.weight_decay 1e-05 -> 0.1"),
        ({"optim": {"epochs": 1}}, "optim.epochs 2 -> 1"),  # fewer epochs: refused
        ({"model": {"d_model": 32}}, "model.d_model 16 -> 32"),
        ({"loss": {"gamma": 0.5}}, "loss.gamma 0.1 -> 0.5"),
        ({"data": {"val_frac": 0.2}}, "data.val_frac 0.1 -> 0.2"),
        ({"run": {"seed": 1}}, "run.seed 0 -> 1"),
    ],
)
def test_resume_refuses_another_config(
    one_epoch: Path, tmp_path: Path, change: dict[str, Any], named: str
) -> None:
    out = tmp_path / "run"
    shutil.copytree(one_epoch, out)
    before = _files(out)
    cfg = tiny_train_config(optim={"epochs": 2, "max_steps": 5})
    for section, values in change.items():
        setattr(cfg, section, dataclasses.replace(getattr(cfg, section), **values))
    with pytest.raises(UserError, match="cannot resume with another config") as e:
        pretrain(cfg, random_pairs(), out, resume=True)
    assert named in str(e.value) and "\n" not in str(e.value)
    assert _files(out) == before  # config.yaml, last.pt, metrics.jsonl untouched


def test_a_checkpoint_from_before_loss_reduce_was_trained_with_the_mean() -> None:
    """loss.reduce came after runs trained with the mean over D (and L): such a run
    resumes under loss.reduce=mean and refuses the spec's sum, not the other way."""
    cfg = tiny_train_config()
    old = cfg.to_dict()
    del old["loss"]["reduce"]
    ck = {"train_config": old}
    pairs = random_pairs()
    mean = tiny_train_config(loss={"reduce": "mean"})
    assert loop.resume_conflicts(ck, mean, pairs, {}) == []
    assert loop.resume_conflicts(ck, cfg, pairs, {}) == ["loss.reduce mean -> sum"]


def test_resume_refuses_other_data_and_keeps_the_corpus(tmp_path: Path) -> None:
    """skab@0 then skab@1: other entities of one data set; evaluate's leakage check
    reads the corpus, so a resume must not replace it. Refused even where the run has
    no epoch left to train."""
    cfg = tiny_train_config(optim={"epochs": 1, "max_steps": 2})
    fold0 = dataclasses.replace(random_pairs(), corpus={"skab": ["1", "2", "3"]})
    pretrain(cfg, fold0, tmp_path)
    fold1 = dataclasses.replace(random_pairs(), corpus={"skab": ["2", "3", "4"]})
    with pytest.raises(UserError, match=r"data skab: new entities \[4\] dropped "
                       r"entities \[1\]"):  # fmt: skip
        pretrain(cfg, fold1, tmp_path, resume=True)
    other = dataclasses.replace(random_pairs(seed=1), corpus=fold0.corpus)
    with pytest.raises(UserError, match="other pairs from the same entities"):
        pretrain(cfg, other, tmp_path, resume=True)
    assert load_checkpoint(tmp_path / "last.pt")["corpus"] == fold0.corpus
    assert pretrain(cfg, fold0, tmp_path, resume=True) == {}  # its own data: done


def test_resume_may_move_the_run_and_add_epochs(tmp_path: Path) -> None:
    """run.device/threads/progress may change; more epochs continue lambda_r's anneal
    from where it stood (the run had reached loss.rec_end: it stays there) instead of
    jumping back up the longer schedule."""
    cfg = tiny_train_config()
    pretrain(cfg, random_pairs(), tmp_path)
    longer = tiny_train_config(optim={"epochs": 3}, run={"threads": 2})
    row = pretrain(longer, random_pairs(), tmp_path, resume=True)
    assert row["epoch"] == 3 and _epochs(tmp_path) == [1, 2, 3]
    assert row["train_lambda_r"] == pytest.approx(cfg.loss.rec_end)
    assert load_checkpoint(tmp_path / "last.pt")["lambda_r"]["from_step"] == 10


def test_cli_resume_with_another_model_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_cli(tmp_path, "--set=optim.epochs=1", "--set=optim.max_steps=2")) == 0
    capsys.readouterr()
    args = _cli(tmp_path, "--set=optim.epochs=2", "--set=model.d_model=32", "--resume")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.d_model 16 -> 32" in err


# -- B2: a run that stopped early has nothing left to do


def test_resuming_an_early_stopped_run_does_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _cli(tmp_path, "--set=optim.epochs=6", "--set=optim.select_from=3",
                "--set=optim.patience=1", "--set=optim.lr=0")  # fmt: skip
    assert main(args) == 0
    assert _epochs(tmp_path) == [1, 2, 3, 4]  # lr 0: stopped after epoch 4
    capsys.readouterr()
    before = _files(tmp_path)
    assert main([*args, "--resume"]) == 0
    assert main([*args, "--resume"]) == 0
    assert capsys.readouterr().out.startswith("nothing to do: early stopping")
    after = _files(tmp_path)
    for name in ("last.pt", "best.pt", "metrics.jsonl"):
        assert after[name] == before[name], name


# -- B3: the end of an epoch is one unit, whatever point a kill hits


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("straight") / "run"
    pretrain(_kill_cfg(), random_pairs(), out)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["improved"] for r in rows)  # every epoch writes best.pt
    return out


def _kill_cfg() -> Any:
    return tiny_train_config(optim={"epochs": 3}, model={"dropout": 0.3})


def _kill_at(
    monkeypatch: pytest.MonkeyPatch, name: str, when: str, epoch: int = 2
) -> None:
    """Stop the run (as SIGKILL would: nothing after it runs) right before or after
    epoch ``epoch`` saves ``name``."""
    real: Callable[..., None] = loop.save_checkpoint

    def save(path: Path, **state: Any) -> None:
        hit = Path(path).name == name and state["epoch"] == epoch
        if hit and when == "before":
            raise KeyboardInterrupt
        real(path, **state)
        if hit and when == "after":
            raise KeyboardInterrupt

    monkeypatch.setattr(loop, "save_checkpoint", save)


@pytest.mark.parametrize(
    ("name", "when"),
    [
        ("best.next.pt", "before"),
        ("best.next.pt", "after"),  # no metrics line yet
        ("last.pt", "before"),  # best.next.pt and the metrics line, no last.pt
        ("last.pt", "after"),  # last.pt, not yet renamed to best.pt
    ],
)
def test_a_kill_at_any_point_of_an_epoch_end_resumes_identically(
    straight: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    when: str,
) -> None:
    out = tmp_path / "run"
    _kill_at(monkeypatch, name, when)
    with pytest.raises(KeyboardInterrupt):
        pretrain(_kill_cfg(), random_pairs(), out)
    monkeypatch.undo()
    pretrain(_kill_cfg(), random_pairs(), out, resume=True)
    _same_weights(straight / "last.pt", out / "last.pt")
    _same_weights(straight / "best.pt", out / "best.pt")  # never stale
    assert load_checkpoint(out / "best.pt")["epoch"] == 3
    assert _epochs(out) == [1, 2, 3]  # every epoch once
    assert not (out / loop.PENDING_BEST).exists()


def test_a_kill_after_last_pt_leaves_best_pt_matching_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after the last epoch's last.pt: the resume has no epoch to train, and
    still settles best.pt and the log."""
    _kill_at(monkeypatch, "last.pt", "after", epoch=3)
    with pytest.raises(KeyboardInterrupt):
        pretrain(_kill_cfg(), random_pairs(), tmp_path)
    monkeypatch.undo()
    assert pretrain(_kill_cfg(), random_pairs(), tmp_path, resume=True) == {}
    last, best = (
        load_checkpoint(tmp_path / "last.pt"),
        load_checkpoint(tmp_path / "best.pt"),
    )
    assert best["epoch"] == 3 and best["best"] == last["best"]
    assert _epochs(tmp_path) == [1, 2, 3]


# -- B4: the checkpoint's RNG state stays on the CPU whatever the device


@pytest.mark.filterwarnings("ignore:for .*copying from a non-meta parameter")
def test_resume_state_restores_onto_another_device(one_epoch: Path) -> None:
    """On CUDA, loading last.pt with map_location=cuda moved the CPU RNG state to the
    GPU and torch.set_rng_state refused it. The meta device stands in for the GPU:
    restoring the run's state onto a meta model must work as it does on CUDA."""
    ck = loop.read_resume(one_epoch / "last.pt")
    assert ck["rng"]["torch"].device.type == "cpu"
    cfg = tiny_train_config()
    model = SCJEPA(cfg.model).to("meta")
    target = make_target(model)
    opt = loop.make_optimizer(model, cfg)
    torch.manual_seed(123)
    loop.restore(ck, one_epoch / "last.pt", model, target, opt, torch.device("meta"))
    assert torch.equal(torch.get_rng_state(), ck["rng"]["torch"])
    state = next(iter(opt.state.values()))
    assert state["exp_avg"].device.type == "meta"  # moved to the model's device


@pytest.mark.requires_cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_resume_on_cuda(tmp_path: Path) -> None:
    cfg = tiny_train_config(optim={"epochs": 2, "max_steps": 8}, run={"device": "cuda"})
    pretrain(cfg, random_pairs(), tmp_path)
    cfg.optim.epochs = 3
    row = pretrain(cfg, random_pairs(), tmp_path, resume=True)
    assert row["epoch"] == 3 or row == {}
    assert load_checkpoint(tmp_path / "last.pt")["rng"]["cuda"] is not None


# -- B7: a fresh run refuses a folder that holds a run


def test_a_fresh_run_refuses_a_folder_holding_a_run(
    one_epoch: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    shutil.copytree(one_epoch, out)
    before = _files(out)
    with pytest.raises(UserError, match=r"holds a run .*--resume.*--overwrite"):
        pretrain(tiny_train_config(), random_pairs(), out)
    # from the command line: refused before the data are read or a file touched;
    # an invalid value (epochs 0) is refused even with --overwrite
    assert main(_cli(out, "--set=optim.epochs=1")) == 2
    assert main(_cli(out, "--set=optim.epochs=0", "--overwrite")) == 2
    assert main(_cli(out, "--resume", "--overwrite")) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and "holds a run" in err[0] and "optim.epochs=0" in err[1]
    assert _files(out) == before
    # --overwrite starts afresh
    assert main(_cli(out, "--set=optim.epochs=1", "--set=optim.max_steps=2",
                     "--overwrite")) == 0  # fmt: skip
    assert _epochs(out) == [1] and load_checkpoint(out / "last.pt")["step"] == 2


# -- B8: a checkpoint that loads but does not fit


def test_a_checkpoint_that_does_not_fit_is_one_line(
    one_epoch: Path, tmp_path: Path
) -> None:
    ck = load_checkpoint(one_epoch / "last.pt")
    bad = tmp_path / "bad.pt"
    save_checkpoint(bad, **(ck | {"config": ck["config"] | {"d_model": 32}}))
    with pytest.raises(UserError, match=r"bad\.pt: its model weights do not fit") as e:
        load_model(bad)
    assert "\n" not in str(e.value)
    save_checkpoint(bad, **(ck | {"config": ck["config"] | {"nope": 1}}))
    with pytest.raises(UserError, match=r"bad\.pt: its model config does not fit"):
        load_model(bad)
    # a weights-only checkpoint (the shipped pooled encoder) as last.pt
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(REPO / "model/pretrained/scjepa-pooled.pt", out / "last.pt")
    with pytest.raises(UserError, match="holds no training state"):
        pretrain(tiny_train_config(), random_pairs(), out, resume=True)


# -- B5: data.val_frac 0 or 1 is refused, never a hang


@pytest.mark.parametrize("frac", [0.0, 1.0, float("nan"), 1e-300])
def test_val_frac_without_two_parts_is_refused(frac: float) -> None:
    """min_pretrain_steps (the hint of pretrain_pairs' refusal) looped forever at 0
    and 1: run in a child process with a time limit, so a hang fails."""
    code = (
        "from training.data.windows import min_pretrain_steps as m\n"
        "from training.errors import DataError\n"
        "try:\n"
        f"    m(100, {frac!r})\n"
        "except DataError as e:\n"
        "    print(e)\n"
    ).replace("nan", "float('nan')")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "val_frac" in done.stdout, done.stderr
    if frac in (0.0, 1.0):
        from training.data import load_dataset, pretrain_pairs
        from training.errors import DataError

        ds = load_dataset("synthetic", seed=0)
        with pytest.raises(DataError, match="strictly between 0 and 1"):
            pretrain_pairs(ds, val_frac=frac, min_train=32)


def test_cli_val_frac_zero_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_cli(tmp_path, "--set=data.val_frac=0")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "data.val_frac=0" in err


def test_pairs_fingerprint_tells_data_apart() -> None:
    a, b = random_pairs(), random_pairs(seed=1)
    assert loop.pairs_fingerprint(a) == loop.pairs_fingerprint(Pairs(a.train, a.val))
    assert loop.pairs_fingerprint(a) != loop.pairs_fingerprint(b)
