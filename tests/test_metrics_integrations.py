"""memostore's ``SummaryWriter`` under the libraries that drive TensorBoard's writer.

PyTorch Lightning's ``TensorBoardLogger`` (through a subclass whose
``experiment`` is memostore's writer) and Hugging Face's ``Trainer`` (through
``TensorBoardCallback(tb_writer=...)``) each train a tiny model inside a
memoised function, in a child process: what they log must land in that call's
evaluation, and the same script run again must hit without training. The
recipes are the ones ``docs/logging.md`` gives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import run_script, write_script

from memostore import Store
from memostore.metrics import load_events, load_series, logged_hparams, metrics_summary
from memostore.records.evaluation import Evaluation

LIGHTNING = """
    import json

    import torch
    from torch import nn
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import TensorBoardLogger
    from lightning.pytorch.loggers.logger import rank_zero_experiment

    import memostore
    from memostore import memo


    class MemostoreLogger(TensorBoardLogger):
        @property
        @rank_zero_experiment
        def experiment(self) -> memostore.SummaryWriter:
            if self._experiment is None:
                self._experiment = memostore.SummaryWriter(log_dir=self.log_dir, **self._kwargs)
            return self._experiment


    class Tiny(pl.LightningModule):
        def __init__(self, lr: float, features: int) -> None:
            super().__init__()
            self.save_hyperparameters()  # logged by Lightning through file_writer.add_summary
            self.layer = nn.Linear(features, 1)
            self.example_input_array = torch.zeros(2, 4)  # for log_graph=True

        def forward(self, x):
            return self.layer(x)

        def training_step(self, batch, i):
            x, y = batch
            loss = nn.functional.mse_loss(self(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, i):
            x, y = batch
            self.log("val_loss", nn.functional.mse_loss(self(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


    class Probe(pl.Callback):
        # What Lightning and user code reach into on the logger's experiment.
        def __init__(self) -> None:
            self.seen = {}

        def on_train_start(self, trainer, module):
            exp = trainer.logger.experiment
            self.seen.update(
                writer=f"{type(exp).__module__}.{type(exp).__qualname__}",
                log_dir=str(exp.log_dir),
                logger_log_dir=trainer.logger.log_dir,
                file_writer=exp.file_writer.get_logdir(),
                same_file_writer=exp._get_file_writer() is exp.file_writer,
            )

        def on_train_batch_end(self, trainer, module, outputs, batch, i):
            # A dict value: Lightning's log_metrics calls add_scalars.
            trainer.logger.log_metrics({"pair": {"a": 1.0, "b": float(i)}}, trainer.global_step)
            self.seen["all_writers"] = sorted(trainer.logger.experiment.all_writers)

        def on_train_end(self, trainer, module):
            final = float(trainer.callback_metrics["train_loss"])
            trainer.logger.experiment.add_hparams({"width": 4}, {"hp/final": final})
            self.seen["final"] = final


    def loader():
        g = torch.Generator().manual_seed(0)
        x = torch.randn(32, 4, generator=g)
        data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
        return torch.utils.data.DataLoader(data, batch_size=8)


    @memo
    def train(epochs: int, lr: float) -> dict:
        torch.manual_seed(0)
        model = Tiny(lr, features=4)
        logger = MemostoreLogger("tb", name="tiny", log_graph=True)
        probe = Probe()
        trainer = pl.Trainer(
            max_epochs=epochs, logger=logger, callbacks=[probe], enable_checkpointing=False,
            accelerator="cpu", log_every_n_steps=1, enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(model, loader(), loader())
        probe.seen["closed"] = logger.experiment.file_writer is None
        print("TRAINED " + json.dumps(probe.seen), flush=True)
        return model.state_dict()


    first = train(2, 0.1)
    again = train(2, 0.1)
    ev = train.lookup(2, 0.1)

    # Outside any memoised call: the logger's writer records a standalone run; the
    # logger's keywords reach the writer (here: event files too, TensorBoard's own).
    plain = MemostoreLogger("tb", name="plain", default_hp_metric=False, event_files=True)
    plain.log_hyperparams({"batch": 8}, {"score": 0.5})
    plain.finalize("success")

    print("RESULT " + json.dumps({
        "id": ev.id,
        "weight": first["layer.weight"].tolist(),
        "hit_equal": all(torch.equal(first[k], again[k]) for k in first),
    }))
"""

HUGGING_FACE = """
    import json

    import torch
    from transformers import (
        GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments,
    )
    from transformers.integrations import TensorBoardCallback

    import memostore
    from memostore import memo


    class MemostoreTensorBoardCallback(TensorBoardCallback):
        # The writer the callback makes itself: at train() and again after train() closed it.
        def _init_summary_writer(self, args):
            self.tb_writer = memostore.SummaryWriter(log_dir=self.logging_dir)


    class ArgumentsAsHparams(TrainerCallback):
        # What transformers 4's TensorBoardCallback also logged (5 no longer does).
        def __init__(self, writer):
            self.writer = writer

        def on_train_begin(self, args, state, control, **kwargs):
            self.writer.add_hparams(args.to_sanitized_dict(), metric_dict={})


    class Tokens(torch.utils.data.Dataset):
        def __init__(self, n: int) -> None:
            g = torch.Generator().manual_seed(n)
            self.ids = torch.randint(0, 64, (n, 16), generator=g)

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}


    @memo
    def train(recipe: str, steps: int, lr: float) -> dict:
        torch.manual_seed(0)
        config = GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=32)
        model = GPT2LMHeadModel(config)
        args = TrainingArguments(
            output_dir=f"out/{recipe}", max_steps=steps, logging_steps=1, report_to=[],
            use_cpu=True, learning_rate=lr, per_device_train_batch_size=4, save_strategy="no",
            disable_tqdm=True, eval_strategy="steps" if recipe == "subclass" else "no",
            eval_steps=2,
        )
        if recipe == "tb_writer":
            writer = memostore.SummaryWriter()
            callbacks = [TensorBoardCallback(tb_writer=writer), ArgumentsAsHparams(writer)]
        else:
            callbacks = [MemostoreTensorBoardCallback()]
        trainer = Trainer(
            model=model, args=args, train_dataset=Tokens(16), eval_dataset=Tokens(8),
            callbacks=callbacks,
        )
        trainer.train()
        if recipe == "subclass":
            trainer.evaluate()  # after train() closed the callback's writer
        print("TRAINED " + json.dumps(trainer.state.log_history), flush=True)
        return model.state_dict()


    results = {}
    for recipe in ("tb_writer", "subclass"):
        first = train(recipe, 4, 1e-3)
        again = train(recipe, 4, 1e-3)
        results[recipe] = {
            "id": train.lookup(recipe, 4, 1e-3).id,
            "hit_equal": all(torch.equal(first[k], again[k]) for k in first),
        }
    print("RESULT " + json.dumps(results))
"""


def _lines(stdout: str, prefix: str) -> list[Any]:
    lines = stdout.splitlines()
    return [json.loads(line[len(prefix) :]) for line in lines if line.startswith(prefix)]


def _show(store: Path, rev: str) -> dict[str, Any]:
    from memostore_cli.main import cli

    result = CliRunner().invoke(cli, ["--store", str(store), "show", rev, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _log(store: Path) -> list[dict[str, Any]]:
    from memostore_cli.main import cli

    result = CliRunner().invoke(cli, ["--store", str(store), "log", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.slow
def test_lightning_tensorboard_logger_logs_into_the_memoised_call(
    store_dir: Path, tmp_path: Path
) -> None:
    pytest.importorskip("lightning.pytorch")
    pytest.importorskip("tensorboard")  # Lightning's hparams summaries and add_graph's tracer
    script = write_script(tmp_path, "fit.py", LIGHTNING)

    proc = run_script(script)
    trained = _lines(proc.stdout, "TRAINED ")
    assert len(trained) == 1, proc.stdout  # the second identical call was a hit
    seen = trained[0]
    (result,) = _lines(proc.stdout, "RESULT ")
    assert result["hit_equal"]

    # What Lightning reaches into is memostore's writer, on Lightning's log_dir.
    log_dir = str(Path("tb", "tiny", "version_0"))
    assert seen["writer"] == "memostore.metrics.writer.SummaryWriter"
    assert seen["log_dir"] == seen["logger_log_dir"] == seen["file_writer"] == log_dir
    assert seen["same_file_writer"]
    assert seen["all_writers"] == [log_dir, f"{log_dir}/pair_a", f"{log_dir}/pair_b"]
    assert seen["closed"]  # Lightning's finalize closed it; its file_writer is None, as torch's

    shown = _show(store_dir, result["id"])
    assert shown["status"] == "ok"
    metrics = shown["metrics"]
    # 32 samples in batches of 8, two epochs: 8 training steps, one validation per epoch.
    assert metrics["train_loss"]["count"] == 8
    assert metrics["val_loss"]["count"] == 2
    assert metrics["epoch"]["first"] == 0 and metrics["epoch"]["last"] == 1
    assert metrics["pair/a"]["count"] == metrics["pair/b"]["count"] == 8
    assert metrics["pair/b"]["max"] == 3
    assert metrics["hp_metric"] == {**metrics["hp_metric"], "count": 1, "first": -1}
    assert metrics["hp/final"]["last"] == pytest.approx(seen["final"])

    store = Store(store_dir)
    ev = Evaluation.load(store, result["id"])
    summary = metrics_summary(store, ev.logs_id)
    assert summary["__graph__"]["kind"] == "graph"  # log_graph=True: add_graph's traced graph
    _, losses, _ = load_series(store, ev.logs_id, "train_loss")
    assert losses[-1] == pytest.approx(seen["final"])
    # Lightning's own hparams (save_hyperparameters, through file_writer.add_summary) and
    # add_hparams' session both join the evaluation's hyper-parameters.
    expected = {"lr": 0.1, "epochs": 2, "features": 4, "width": 4}
    assert shown["hparams"] == {**shown["hparams"], **expected}
    logged = logged_hparams(store, ev.logs_id)
    assert logged["hparams"] == {**logged["hparams"], "features": 4, "width": 4}
    assert {"hp_metric", "hp/final"} <= set(logged["metrics"])
    assert not list((tmp_path / "tb" / "tiny").rglob("events.out.tfevents*"))  # store only
    assert (tmp_path / log_dir / "hparams.yaml").is_file()  # Lightning's own file, as usual

    # Outside any memoised call the logger's writer made a standalone run evaluation.
    runs = [e for e in _log(store_dir) if e["function"] == "run:fit.py"]
    assert len(runs) == 1
    plain = _show(store_dir, runs[0]["id"])
    assert plain["metrics"]["score"]["last"] == 0.5
    assert plain["hparams"] == {"batch": 8}
    # ... and, with event_files=True, TensorBoard's event file of the same summaries.
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    (events,) = (tmp_path / "tb" / "plain" / "version_0").glob("events.out.tfevents*")
    tags = {v.tag for e in EventFileLoader(str(events)).Load() for v in e.summary.value}
    assert {"score", "_hparams_/experiment", "_hparams_/session_start_info"} <= tags

    # Run again: a hit, from another process, that does not train.
    proc = run_script(script)
    assert _lines(proc.stdout, "TRAINED ") == []
    (again,) = _lines(proc.stdout, "RESULT ")
    assert again["id"] == result["id"]
    assert again["weight"] == result["weight"]


@pytest.mark.slow
def test_hugging_face_trainer_logs_into_the_memoised_call(store_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # Trainer needs it
    pytest.importorskip("tensorboard")  # TensorBoardCallback refuses to start without it
    script = write_script(tmp_path, "hf.py", HUGGING_FACE)
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

    proc = run_script(script, env=env)
    history, subclass_history = _lines(proc.stdout, "TRAINED ")  # each second call hit
    (results,) = _lines(proc.stdout, "RESULT ")
    assert results["tb_writer"]["hit_equal"] and results["subclass"]["hit_equal"]
    store = Store(store_dir)

    # TensorBoardCallback(tb_writer=memostore.SummaryWriter()): what train() logs.
    shown = _show(store_dir, results["tb_writer"]["id"])
    assert shown["status"] == "ok"
    metrics = shown["metrics"]
    steps = [h for h in history if "loss" in h]
    assert [m["count"] for m in (metrics["train/loss"], metrics["train/learning_rate"])] == [4, 4]
    assert metrics["train/learning_rate"]["first"] == steps[0]["learning_rate"]
    assert metrics["train/learning_rate"]["last"] == steps[-1]["learning_rate"]
    assert metrics["train/train_runtime"]["count"] == 1
    ev = Evaluation.load(store, results["tb_writer"]["id"])
    step_ids, losses, _ = load_series(store, ev.logs_id, "train/loss")
    assert step_ids.tolist() == [h["step"] for h in steps]
    assert losses.tolist() == [h["loss"] for h in steps]  # the values the Trainer logged
    (args_text,) = load_events(store, ev.logs_id, "args")
    assert json.loads(args_text["text"])["max_steps"] == 4
    (config_text,) = load_events(store, ev.logs_id, "model_config")
    assert json.loads(config_text["text"])["n_embd"] == 32
    # add_hparams(args.to_sanitized_dict(), {}): the training arguments are hyper-parameters.
    hparams = logged_hparams(store, ev.logs_id)["hparams"]
    assert hparams["learning_rate"] == 1e-3 and hparams["max_steps"] == 4
    assert shown["hparams"] == {**shown["hparams"], "steps": 4, "lr": 1e-3, "use_cpu": True}

    # The subclass: trainer.evaluate() after train() continues the same run and series.
    metrics = _show(store_dir, results["subclass"]["id"])["metrics"]
    evals = [h["eval_loss"] for h in subclass_history if "eval_loss" in h]
    assert len(evals) == 3  # at steps 2 and 4, then evaluate()
    assert metrics["eval/loss"]["count"] == 3
    assert metrics["eval/loss"]["last"] == evals[-1]
    assert metrics["train/loss"]["count"] == 4
    assert not list(tmp_path.rglob("events.out.tfevents*"))  # no torch writer took over
