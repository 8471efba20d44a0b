"""Values of the libraries people train with restore with nothing to configure.

Lightning's hyperparameter containers and modules, Hugging Face configurations
and tokenizers, PEFT models, ``torch.compile``d modules, pandas frames and a
dynamically quantized model as an argument: each is stored by a memoised call
and served by the next one, in this process and in a fresh one.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import run_script, write_script
from memostore_cli.main import cli

from memostore import MemostoreWarning, ignore_global, memo

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

try:
    import lightning
except ImportError:  # the tests that need it are skipped
    lightning = None

if lightning is not None:

    class LitNet(lightning.LightningModule):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(x)

    def lit_net(lr: Any) -> Any:
        # Seeded in the body: a hit does not depend on what earlier tests drew.
        torch.manual_seed(0)
        return LitNet(lr=lr)


calls: list[str] = ignore_global([])  # what ran; not part of any key


@memo(ignore=("make",))
def build(kind: str, make: Callable[[], Any]) -> Any:
    calls.append(kind)
    return make()


def miss_then_hit(kind: str, make: Callable[[], Any]) -> tuple[Any, Any]:
    """The miss's value and the hit's, asserting the second call ran nothing, quietly."""
    calls.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", MemostoreWarning)
        first = build(kind, make)
        second = build(kind, make)
    assert calls == [kind], f"{kind}: the second call computed again"
    return first, second


# -- Lightning -----------------------------------------------------------------------------------
def test_lightning_hparams_and_a_module_restore(store_dir: Path) -> None:
    if lightning is None:
        pytest.skip("lightning is not installed")
    from lightning.fabric.utilities.data import AttributeDict

    first, second = miss_then_hit("attrdict", lambda: AttributeDict(lr=0.1, name="x"))
    assert type(second) is AttributeDict and second == first and second.lr == 0.1

    first, second = miss_then_hit("lightning", lambda: lit_net(0.5))
    assert type(second) is LitNet and type(second.hparams) is type(first.hparams)
    assert second.hparams == {"lr": 0.5} and second.hparams.lr == 0.5
    x = torch.ones(2, 3)
    assert torch.equal(second(x), first(x))
    assert isinstance(second, lightning.LightningModule)


# -- Hugging Face -------------------------------------------------------------------------------
def _tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "[PAD]": 1, "hello": 2, "world": 3}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]")


def test_hugging_face_tokenizers_and_configs_restore(store_dir: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from transformers import BertConfig

    first, second = miss_then_hit("tokenizer", _tokenizer)
    assert type(second) is type(first)
    encoded = second(["hello world", "world zzz"], padding=True)
    assert encoded["input_ids"] == first(["hello world", "world zzz"], padding=True)["input_ids"]
    assert encoded["input_ids"] == [[2, 3], [3, 0]]
    assert second.pad_token == "[PAD]" and len(second) == 4

    config = lambda: BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2)  # noqa: E731
    first, second = miss_then_hit("config", config)
    assert type(second) is BertConfig and second.to_dict() == first.to_dict()


TOKENIZER_KEY = """
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast
from memostore import memo


@memo
def tokenize(tokenizer, text):
    return tokenizer(text)["input_ids"]


vocab = {f"w{i}": i for i in range(50)}
backend = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
print(tokenize.key(PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="w0"), "w1"))
"""


def test_a_tokenizer_keys_alike_in_every_process(store_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    script = write_script(tmp_path, "tok_key.py", TOKENIZER_KEY)
    keys = {run_script(script, env={"PYTHONHASHSEED": s}).stdout.strip() for s in ("1", "2")}
    assert len(keys) == 1


# -- PEFT ----------------------------------------------------------------------------------------
def test_a_peft_model_restores(store_dir: Path) -> None:
    peft = pytest.importorskip("peft")

    def make() -> Any:
        torch.manual_seed(0)
        base = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
        model = peft.get_peft_model(base, peft.LoraConfig(target_modules=["0", "2"], r=2))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.fill_(0.5)  # LoRA B starts at zero: make the adapter matter
        return model

    first, second = miss_then_hit("peft", make)
    assert type(second) is type(first) and isinstance(second, peft.PeftModel)
    x = torch.arange(8.0).reshape(2, 4)
    assert torch.equal(second(x), first(x))
    trainable = [n for n, p in second.named_parameters() if p.requires_grad]
    assert trainable == [n for n, p in first.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


# -- torch.compile -------------------------------------------------------------------------------
@memo
def fit(model: Any, steps: int) -> Any:
    calls.append("fit")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        model._orig_mod(torch.ones(1, 3)).sum().backward()  # not compiled: fast on CPU
        opt.step()
    return model


def test_a_compiled_module_restores_compiled_and_keys_by_its_module(store_dir: Path) -> None:
    torch.manual_seed(0)
    plain = torch.nn.Linear(3, 2)
    compiled = torch.compile(plain)
    assert fit.key(compiled, 1) == fit.key(torch.compile(plain), 1)
    assert fit.key(compiled, 1) != fit.key(plain, 1)
    other = torch.nn.Linear(3, 2)
    assert fit.key(torch.compile(other), 1) != fit.key(compiled, 1)

    calls.clear()
    first = fit(compiled, 1)
    assert first is compiled
    torch.manual_seed(0)
    again = torch.nn.Linear(3, 2)  # equal to what plain was before the call
    second = fit(torch.compile(again), 1)
    assert calls == ["fit"], "the second call computed again"
    assert type(second).__name__ == "OptimizedModule"
    assert type(second._orig_mod) is torch.nn.Linear
    assert torch.equal(second._orig_mod.weight, plain.weight)
    assert torch.equal(again.weight, plain.weight)  # the argument got its post-call state


# -- pandas --------------------------------------------------------------------------------------
def _frames() -> dict[str, Any]:
    return {
        "mixed": pd.DataFrame(
            {
                "a": [1, 2, 3],
                "b": ["x", "y", None],
                "c": pd.Categorical(["u", "v", "u"], categories=["v", "u", "w"], ordered=True),
                "d": pd.to_datetime(["2020-01-01", "2021-01-01", None]).tz_localize("UTC"),
                "e": pd.array([1, None, 3], dtype="Int64"),
                "f": [0.5, -0.0, np.nan],
                "g": np.array([1, 2, 3], dtype=np.float32),
            },
            index=pd.Index([30, 10, 20], name="idx"),
        )[["g", "a", "f", "b", "c", "d", "e"]],
        "multiindex": pd.DataFrame(
            {"v": [1.0, 2.0]},
            index=pd.MultiIndex.from_tuples([("a", 1), ("b", 2)], names=["k", "n"]),
        ),
        "int labels": pd.DataFrame({2: [1, 2], 1: [3, 4]}),
        "range step": pd.DataFrame({"a": [1, 2]}, index=pd.RangeIndex(0, 4, 2, name="r")),
        "empty": pd.DataFrame(),
    }


@memo
def echo(value: Any, tag: str) -> Any:
    calls.append(tag)
    return value


@pytest.mark.parametrize("name", list(_frames()))
def test_a_dataframe_round_trips_through_arrow(store_dir: Path, name: str) -> None:
    frame = _frames()[name]
    frame.attrs["source"] = "test"
    calls.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", MemostoreWarning)
        echo(frame, name)
        restored = echo(frame.copy(), name)  # an equal copy keys alike
    assert calls == [name]
    assert restored is not frame and type(restored) is pd.DataFrame
    pd.testing.assert_frame_equal(restored, frame, check_exact=True)
    assert list(restored.columns) == list(frame.columns)
    assert restored.attrs == {"source": "test"}


def test_a_series_round_trips_and_frames_key_by_content(store_dir: Path) -> None:
    series = pd.Series(pd.Categorical(["a", "b", "a"]), index=[3, 1, 2], name=("s", 1))
    calls.clear()
    echo(series, "series")
    restored = echo(series.copy(), "series")
    assert calls == ["series"]
    pd.testing.assert_series_equal(restored, series, check_exact=True)
    frame = _frames()["mixed"]
    changed = frame.copy()
    changed.loc[10, "a"] = 7
    assert echo.key(frame, "k") == echo.key(frame.copy(), "k")
    assert echo.key(frame, "k") != echo.key(changed, "k")
    assert echo.key(frame, "k") != echo.key(frame[list(reversed(frame.columns))], "k")


def test_pandas_is_not_imported_with_memostore(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "imports.py",
        """
        import sys
        import memostore
        print(sorted({"pandas", "pyarrow", "tokenizers"} & set(sys.modules)))
        """,
    )
    assert run_script(script).stdout.strip() == "[]"


# -- quantized models ----------------------------------------------------------------------------
@memo
def predict(model: Any, x: torch.Tensor) -> torch.Tensor:
    calls.append("predict")
    return model(x)


def test_a_dynamically_quantized_model_keys_as_an_argument(store_dir: Path) -> None:
    def quantized(seed: int) -> Any:
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
        with warnings.catch_warnings():
            # torch's deprecation of torch.ao, and of making quantized tensors
            warnings.simplefilter("ignore", UserWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, torch.qint8)

    x = torch.ones(1, 4)
    assert predict.key(quantized(0), x) == predict.key(quantized(0), x)
    assert predict.key(quantized(0), x) != predict.key(quantized(1), x)
    calls.clear()
    first = predict(quantized(0), x)
    second = predict(quantized(0), x)
    assert calls == ["predict"] and torch.equal(first, second)


# -- classes stored by value ------------------------------------------------------------------
LOCAL_DATASET = """
import sys

import torch
from memostore import memo


def to_map_style_dataset(items):
    class _MapStyleDataset(torch.utils.data.Dataset):
        def __init__(self, items):
            self._data = list(items)

        def __len__(self):
            return len(self._data)

        def __getitem__(self, i):
            return self._data[i]

    return _MapStyleDataset(items)


@memo
def load(n):
    print("COMPUTED")
    return to_map_style_dataset(range(n))


ds = load(3)
print(type(ds).__qualname__, type(ds).__module__, list(ds))
"""


def test_a_class_stored_by_value_keeps_its_names_in_another_process(tmp_path: Path) -> None:
    script = write_script(tmp_path, "local_dataset.py", LOCAL_DATASET)
    env = {"MEMOSTORE_DIR": str(tmp_path / "store")}
    first = run_script(script, env=env).stdout.splitlines()
    second = run_script(script, env=env).stdout.splitlines()
    assert first[0] == "COMPUTED" and "COMPUTED" not in second
    assert (
        second == first[1:] == ["to_map_style_dataset.<locals>._MapStyleDataset __main__ [0, 1, 2]"]
    )


# -- what still cannot restore ----------------------------------------------------------------
@memo
def objects_frame(n: int) -> Any:
    calls.append("objects_frame")
    return pd.DataFrame({"mixed": pd.Series([n, "x"], dtype=object)})


@memo
def objects_frame_too(n: int) -> Any:
    calls.append("objects_frame_too")
    return pd.DataFrame({"mixed": pd.Series([n, "x"], dtype=object)})


def test_a_value_that_cannot_restore_says_why_once_at_the_users_call(store_dir: Path) -> None:
    calls.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            objects_frame(1)  # stored by pickling: pandas' reconstructors are not allowed
            objects_frame_too(1)  # the same reason, another function: said for it too
    assert calls == ["objects_frame", "objects_frame_too"] * 3
    ours = [w for w in caught if issubclass(w.category, MemostoreWarning)]
    assert len(ours) == 2, [str(w.message) for w in ours]
    for warning, name in zip(ours, ("objects_frame:", "objects_frame_too:"), strict=True):
        assert warning.filename == __file__
        text = str(warning.message)
        assert name in text and "pandas" in text and "add_safe_globals" in text


LIGHTNING_FIT = """
import json
import subprocess
import sys

import lightning as L
import torch
from memostore import log, memo


class Net(L.LightningModule):
    def __init__(self, lr=0.1):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(3, 1)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, i):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        log({"loss": loss.item()})
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


@memo
def train(epochs):
    print("COMPUTED")
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(16, 3), torch.randn(16, 1))
    trainer = L.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    model = Net(lr=0.05)
    trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=4))
    return model


model = train(2)
print("RESULT", type(model).__name__, dict(model.hparams), model.layer.weight.tolist())
"""


def test_a_module_a_lightning_trainer_fitted_is_stored_and_hits_in_another_process(
    tmp_path: Path,
) -> None:
    if lightning is None:
        pytest.skip("lightning is not installed")
    script = write_script(tmp_path, "fit.py", LIGHTNING_FIT)
    store = tmp_path / "store"
    env = {"MEMOSTORE_DIR": str(store)}
    first = run_script(script, env=env)
    assert "COMPUTED" in first.stdout and "MemostoreWarning" not in first.stderr, first.stderr
    second = run_script(script, env=env)
    assert "COMPUTED" not in second.stdout and "MemostoreWarning" not in second.stderr
    result = [line for line in first.stdout.splitlines() if line.startswith("RESULT")]
    assert result and result == [ln for ln in second.stdout.splitlines() if ln.startswith("RESULT")]
    assert "{'lr': 0.05}" in result[0]
    show = CliRunner().invoke(cli, ["--store", str(store), "show", "train", "--json"])
    assert json.loads(show.output)["metrics"]["loss"]["count"] == 8  # 2 epochs of 4 batches


def test_an_omegaconf_config_and_lightning_hparams_from_it_restore(store_dir: Path) -> None:
    omegaconf = pytest.importorskip("omegaconf")

    def make() -> Any:
        cfg = omegaconf.OmegaConf.create({"lr": 0.1, "model": {"sizes": [3, 2], "ref": "${lr}"}})
        omegaconf.OmegaConf.set_struct(cfg, True)
        return cfg

    first, second = miss_then_hit("omegaconf", make)
    assert type(second) is type(first) and omegaconf.OmegaConf.is_struct(second)
    assert omegaconf.OmegaConf.to_container(second) == omegaconf.OmegaConf.to_container(first)
    assert second.model.ref == 0.1  # the interpolation is kept, and resolves
    if lightning is None:
        return
    first, second = miss_then_hit("hparams from a config", lambda: lit_net(make()))
    assert type(second.hparams) is type(first.hparams)
    assert second.hparams.lr.model.ref == 0.1
