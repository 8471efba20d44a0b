"""The hit contract on idioms where a hit once differed from a miss without a word.

Each test runs code as a user writes it, in fresh processes: the memoised
script against the same script without memostore (``@memo`` made a no-op), and
runs of hits, of misses and of both mixed, which must all print what the plain
script prints. Then the failures that at least spoke, but cost users their
cache or their trust: each must now work, or say why.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import run_script, write_script

REPO = Path(__file__).resolve().parent.parent

# MKL, torch's BLAS on CPU, may round the same product differently from one process
# to the next unless told to be reproducible (see test_hit_contract.py).
REPRODUCIBLE = {"MKL_CBWR": "COMPATIBLE", "PYTHONWARNINGS": "ignore::UserWarning"}
NO_MEMO = "def memo(fn=None, **kw):\n    return fn if fn is not None else (lambda f: f)\n"


def _plain(tmp_path: Path, name: str, source: str) -> Path:
    """The script with ``from memostore import memo`` replaced by a decorator that does nothing."""
    text = source.replace("from memostore import memo\n", NO_MEMO)
    assert text != source, "the script must import memo on a line of its own"
    return write_script(tmp_path, f"plain_{name}", text)


def _run(script: Path, *args: str, store: Path, env: dict[str, str] | None = None) -> Any:
    full = {**REPRODUCIBLE, "MEMOSTORE_DIR": str(store), "MEMOSTORE_VERBOSE": "1", **(env or {})}
    return run_script(script, *args, env=full, timeout=300)


def _calls(proc: Any) -> list[str]:
    """The "function hit|miss" verbose lines of a run."""
    found = re.findall(r"^memostore: (\w+): (hit|miss)", proc.stderr, re.M)
    return [f"{name} {kind}" for name, kind in found]


def _warnings(proc: Any) -> list[str]:
    return re.findall(r"MemostoreWarning: (.*)", proc.stderr)


# -- 1. a hit binds what the miss bound ----------------------------------------------------------
KEPT = """
import sys
import torch
import torch.nn as nn
from memostore import memo

torch.manual_seed(0)
model = nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=1.0)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)


class Tracker:
    def __init__(self):
        self.best = torch.zeros(1)
        self.hist = []


@memo
def train_epoch(model, opt, sched, tr, value):
    opt.zero_grad()
    model(torch.ones(4, 2)).pow(2).sum().backward()
    opt.step()
    sched.step()
    tr.best = torch.maximum(tr.best, torch.tensor([float(value)]))
    tr.hist = tr.hist + [value]


tr = Tracker()
lrs, bests, hists = [], [], []
for value in [int(v) for v in sys.argv[1].split(",")]:
    train_epoch(model, opt, sched, tr, value)
    lrs.append(sched.get_last_lr())   # the scheduler's own list, kept
    bests.append(tr.best)             # the tracker's tensor, kept
    hists.append(tr.hist)
print("lrs", lrs)
print("bests", [b.item() for b in bests], "hists", hists)
print("weight", model.weight.detach().tolist(), "lr", opt.param_groups[0]["lr"])
"""


@pytest.mark.slow
def test_objects_the_caller_kept_are_not_overwritten_by_later_hits(tmp_path: Path) -> None:
    script = write_script(tmp_path, "kept.py", KEPT)
    plain = _plain(tmp_path, "kept.py", KEPT)
    store = tmp_path / "store"
    expected = _run(plain, "1,3,2", store=tmp_path / "unused").stdout
    assert "lrs [[0.5], [0.25], [0.125]]" in expected
    assert "bests [1.0, 3.0, 3.0] hists [[1], [1, 3], [1, 3, 2]]" in expected
    first = _run(script, "1", store=store)
    assert _calls(first) == ["train_epoch miss"]
    mixed = _run(script, "1,3,2", store=store)
    assert _calls(mixed) == ["train_epoch hit", "train_epoch miss", "train_epoch miss"]
    assert mixed.stdout == expected
    hits = _run(script, "1,3,2", store=store)
    assert _calls(hits) == ["train_epoch hit"] * 3
    assert hits.stdout == expected, "a hit overwrote an object the caller kept"


# -- 2. a result attached to autograd ------------------------------------------------------------
AUTOGRAD = """
import torch
import torch.nn as nn
from memostore import memo

torch.manual_seed(0)
backbone = nn.Linear(3, 4)
head = nn.Linear(4, 1)
opt = torch.optim.SGD([*backbone.parameters(), *head.parameters()], lr=0.1)
x = torch.randn(5, 3)


@memo
def features(model, x):
    return torch.relu(model(x))


for step in range(3):
    opt.zero_grad()
    f = features(backbone, x)
    head(f).pow(2).sum().backward()
    opt.step()
print("backbone", backbone.weight.detach().sum().item(), "grad_fn", f.grad_fn is not None)
"""


@pytest.mark.slow
def test_a_result_attached_to_autograd_is_never_served_from_the_store(tmp_path: Path) -> None:
    script = write_script(tmp_path, "autograd.py", AUTOGRAD)
    plain = _plain(tmp_path, "autograd.py", AUTOGRAD)
    store = tmp_path / "store"
    expected = _run(plain, store=tmp_path / "unused").stdout
    for _ in range(2):
        proc = _run(script, store=store)
        assert proc.stdout == expected, "the backbone must train as in the plain script"
        assert _calls(proc) == ["features miss"] * 3
        warned = _warnings(proc)
        assert len(warned) == 1, warned
        assert "grad_fn=ReluBackward0" in warned[0] and ".detach()" in warned[0]


# -- 3. a class picked by name -------------------------------------------------------------------
MODELS = """
import torch.nn as nn


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)

    def forward(self, x):
        return self.fc(x) * 1


def small():
    return Small()
"""

BY_NAME = """
import torch
import models
from memostore import memo


@memo
def run_dict(arch):
    torch.manual_seed(0)
    return models.__dict__[arch]()(torch.ones(1, 2)).item()   # pytorch/examples imagenet


@memo
def run_getattr(arch):
    torch.manual_seed(0)
    return getattr(models, arch)()(torch.ones(1, 2)).item()


@memo
def run_vars(arch):
    torch.manual_seed(0)
    return vars(models)[arch]()(torch.ones(1, 2)).item()


print(run_dict("small"), run_getattr("Small"), run_vars("small"))
"""


@pytest.mark.slow
def test_a_class_picked_by_name_is_a_dependency(tmp_path: Path) -> None:
    (tmp_path / "models.py").write_text(MODELS)
    script = write_script(tmp_path, "by_name.py", BY_NAME)
    plain = _plain(tmp_path, "by_name.py", BY_NAME)
    store = tmp_path / "store"
    first = _run(script, store=store)
    assert first.stdout == _run(plain, store=tmp_path / "unused").stdout
    assert _calls(_run(script, store=store)) == ["run_dict hit", "run_getattr hit", "run_vars hit"]
    models = tmp_path / "models.py"
    models.write_text(MODELS.replace("* 1", "* 2"))
    edited = _run(script, store=store)
    assert _calls(edited) == ["run_dict miss", "run_getattr miss", "run_vars miss"]
    assert edited.stdout == _run(plain, store=tmp_path / "unused").stdout
    assert edited.stdout != first.stdout
    models.write_text(MODELS)  # back: the first results are still stored
    again = _run(script, store=store)
    assert _calls(again) == ["run_dict hit", "run_getattr hit", "run_vars hit"]
    assert again.stdout == first.stdout


# -- 4. what a body reads from the process -------------------------------------------------------
PROCESS = """
import os
import sys
import torch
import torch.nn as nn
from memostore import memo


@memo
def make():
    torch.manual_seed(0)
    return nn.Linear(4, 1)


@memo
def width():
    return int(os.environ["HIDDEN"]) * 2


if sys.argv[1] == "float64":
    torch.set_default_dtype(torch.float64)
layer = make()
print(layer.weight.dtype, layer.weight.sum().item(), width())
"""


@pytest.mark.slow
def test_torch_settings_and_environment_variables_key_the_call(tmp_path: Path) -> None:
    script = write_script(tmp_path, "process.py", PROCESS)
    plain = _plain(tmp_path, "process.py", PROCESS)
    store = tmp_path / "store"
    runs = [
        ("float32", "3", ["make miss", "width miss"]),
        ("float64", "3", ["make miss", "width miss"]),  # the default dtype keys every call
        ("float32", "4", ["make hit", "width miss"]),  # HIDDEN was 3 when width ran
        ("float64", "3", ["make hit", "width hit"]),
        ("float32", "3", ["make hit", "width hit"]),  # both values of HIDDEN are kept
        ("float32", "4", ["make hit", "width hit"]),
    ]
    expected: dict[tuple[str, str], str] = {}
    for dtype, hidden, calls in runs:
        env = {"HIDDEN": hidden}
        if (dtype, hidden) not in expected:
            expected[dtype, hidden] = _run(plain, dtype, store=tmp_path / "unused", env=env).stdout
        proc = _run(script, dtype, store=store, env=env)
        assert proc.stdout == expected[dtype, hidden], f"{dtype}, HIDDEN={hidden}"
        assert _calls(proc) == calls, f"{dtype}, HIDDEN={hidden}"
    assert "float64" in expected["float64", "3"] and expected["float32", "4"].endswith(" 8\n")


# -- 5. numpy aliases ----------------------------------------------------------------------------
ALIAS = """
import numpy as np
import torch

arr = np.random.default_rng(0).random((5, 3))
t = torch.from_numpy(arr)   # before memostore has met torch

from memostore import memo


@memo
def column_means(t):
    return t.mean(0).tolist()


print([round(v, 6) for v in column_means(t)])
arr -= arr.mean(0)          # written through the array, not the tensor
print([round(v, 6) for v in column_means(t)])
"""


@pytest.mark.slow
def test_a_tensor_over_an_array_made_before_memostore_is_never_stale(tmp_path: Path) -> None:
    script = write_script(tmp_path, "alias.py", ALIAS)
    plain = _plain(tmp_path, "alias.py", ALIAS)
    store = tmp_path / "store"
    expected = _run(plain, store=tmp_path / "unused").stdout
    assert expected.splitlines()[1] == "[0.0, -0.0, -0.0]"
    first = _run(script, store=store)
    assert first.stdout == expected
    second = _run(script, store=store)
    assert second.stdout == expected
    assert _calls(second) == ["column_means hit", "column_means hit"]


# -- 6. a path inside an argument ----------------------------------------------------------------
PATHS = """
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from memostore import memo


@dataclass
class DataCfg:
    path: Path


@memo
def rows(cfg):
    return len(cfg.path.read_text().splitlines())


@memo(files=("cfg.path",))
def rows_by_content(cfg):
    return len(cfg.path.read_text().splitlines())


Path("data.csv").write_text(sys.argv[1].replace(",", "\\n"))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    print(rows(DataCfg(Path("data.csv"))), rows_by_content(DataCfg(Path("data.csv"))))
for w in caught:
    print("warned:", w.message)
"""


@pytest.mark.slow
def test_a_file_read_through_an_argument_is_an_input_declared_or_not(tmp_path: Path) -> None:
    script = write_script(tmp_path, "paths.py", PATHS)
    store = tmp_path / "store"
    first = _run(script, "a,b", store=store).stdout.splitlines()
    assert first == ["2 2"]  # nothing to warn about: the read is observed
    proc = _run(script, "a,b,c", store=store)
    # Undeclared, the body's read of the file keys it by content; declared, so does files=.
    assert proc.stdout.splitlines()[0] == "3 3"
    assert _calls(proc) == ["rows miss", "rows_by_content miss"]


# -- 7. identities the miss made -----------------------------------------------------------------
VIEWS = """
import numpy as np
import torch
from memostore import memo


class Box:
    pass


@memo
def head(x):
    return x[:2]


@memo
def head_of_array(a):
    return a[1:]


@memo
def tie(a, b):
    b.w = a.w          # b takes a's tensor itself
    a.w.mul_(2)


@memo
def shared(a, b):
    t = torch.ones(2)  # one new tensor in two places
    a.t = t
    b.t = t
    return t


x = torch.arange(4.0)
h = head(x)
h.sub_(h.mean())           # changes x, as the plain function's view does
arr = np.arange(4.0)
head_of_array(arr)[0] = 9.0
a, b = Box(), Box()
a.w, b.w = torch.ones(2), torch.zeros(2)
tie(a, b)
a.w.add_(1)
c, d = Box(), Box()
c.t = d.t = None
r = shared(c, d)
r.add_(1)
print(x.tolist(), arr.tolist(), b.w is a.w, b.w.tolist(), c.t is d.t is r, d.t.tolist())
"""


@pytest.mark.slow
def test_views_and_shared_objects_the_miss_made_hold_after_a_hit(tmp_path: Path) -> None:
    script = write_script(tmp_path, "views.py", VIEWS)
    plain = _plain(tmp_path, "views.py", VIEWS)
    store = tmp_path / "store"
    expected = _run(plain, store=tmp_path / "unused").stdout
    assert expected.startswith("[-0.5, 0.5, 2.0, 3.0] [0.0, 9.0, 2.0, 3.0] True [3.0, 3.0] True")
    assert _run(script, store=store).stdout == expected
    hits = _run(script, store=store)
    assert _calls(hits) == ["head hit", "head_of_array hit", "tie hit", "shared hit"]
    assert hits.stdout == expected


# -- louder failures -----------------------------------------------------------------------------
HF_KEYS = """
import sys
import warnings
warnings.filterwarnings("ignore")
import torch
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel
from memostore import memo

torch.manual_seed(0)
gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=16))
bert = BertModel(BertConfig(num_hidden_layers=1, hidden_size=16, num_attention_heads=2,
                            intermediate_size=32, vocab_size=50))


@memo
def logits(model, ids):
    with torch.no_grad():
        return round(model(ids).logits.sum().item(), 4)


values = {"gpt2": gpt2, "generation_config": gpt2.generation_config, "bert": bert,
          "bert_config": bert.config, "names": {"a", "b", "c"}}
print(json.dumps({name: logits.key(value, None) for name, value in values.items()}))
print(logits(gpt2, torch.tensor([[1, 2, 3]])))
""".replace("import sys\n", "import json\nimport sys\n")


@pytest.mark.slow
def test_hugging_face_models_key_alike_under_any_hash_seed(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    script = write_script(tmp_path, "hf.py", HF_KEYS)
    store = tmp_path / "store"
    runs = [_run(script, store=store, env={"PYTHONHASHSEED": seed}) for seed in ("1", "2")]
    keys = [json.loads(proc.stdout.splitlines()[0]) for proc in runs]
    differ = [name for name in keys[0] if keys[0][name] != keys[1][name]]
    assert not differ, f"keyed differently under two PYTHONHASHSEEDs: {differ}"
    assert _calls(runs[1]) == ["logits hit"]
    assert runs[0].stdout.splitlines()[1] == runs[1].stdout.splitlines()[1]


PARAMETRIZED = """
import torch
import torch.nn as nn
from torch.nn.utils import parametrizations
from memostore import memo


@memo
def make():
    torch.manual_seed(0)
    return nn.Sequential(parametrizations.weight_norm(nn.Linear(3, 4)), nn.ReLU(),
                         parametrizations.spectral_norm(nn.Linear(4, 2)))


@memo
def train(model, x):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(x).sum().backward()
    opt.step()
    return model(x).detach()


model = make()
x = torch.ones(2, 3)
out = train(model, x)
print(type(model[0]).__name__, out.sum().item(), model(x).detach().tolist())
print([p.detach().sum().item() for p in model.parameters()])
"""


@pytest.mark.slow
def test_parametrized_modules_round_trip_and_replay(tmp_path: Path) -> None:
    script = write_script(tmp_path, "param.py", PARAMETRIZED)
    plain = _plain(tmp_path, "param.py", PARAMETRIZED)
    store = tmp_path / "store"
    expected = _run(plain, store=tmp_path / "unused").stdout
    first = _run(script, store=store)
    assert first.stdout == expected and not _warnings(first)
    second = _run(script, store=store)
    assert _calls(second) == ["make hit", "train hit"]
    assert second.stdout == expected


LOGGER = """
import logging
from memostore import memo


class Trainer:
    def __init__(self):
        self.log = logging.getLogger("train")
        self.steps = 0


@memo
def fit(trainer, n):
    trainer.steps += n
    return trainer.steps


@memo
def make():
    return Trainer()


t = Trainer()
made = make()
registry_logger = logging.getLogger("train")
print(fit(t, 2), t.steps, t.log is registry_logger, made.log is registry_logger)
"""


def test_a_held_logger_restores_as_the_registry_s_logger(tmp_path: Path) -> None:
    script = write_script(tmp_path, "logger.py", LOGGER)
    store = tmp_path / "store"
    first = _run(script, store=store)
    assert first.stdout.split() == ["2", "2", "True", "True"] and not _warnings(first)
    second = _run(script, store=store)
    assert _calls(second) == ["make hit", "fit hit"]
    assert second.stdout == first.stdout


ADD_GROUP = """
import torch
import torch.nn as nn
from memostore import memo

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
for p in model[1].parameters():
    p.requires_grad_(False)
opt = torch.optim.SGD(model[0].parameters(), lr=0.1, momentum=0.9)
x = torch.ones(3, 2)


@memo
def unfreeze(model, opt):
    for p in model[1].parameters():
        p.requires_grad_(True)
    opt.add_param_group({"params": list(model[1].parameters()), "lr": 0.01})


@memo
def step(model, opt):
    opt.zero_grad()
    model(x).pow(2).sum().backward()
    opt.step()


step(model, opt)
unfreeze(model, opt)
step(model, opt)
step(model, opt)
group = opt.param_groups[1]["params"]
print(len(opt.param_groups), group[0] is model[1].weight, group[1] is model[1].bias)
print([round(v, 6) for p in model.parameters() for v in p.detach().flatten().tolist()])
print(sorted(round(s["momentum_buffer"].sum().item(), 6) for s in opt.state.values()))
"""


@pytest.mark.slow
def test_add_param_group_in_a_body_replays(tmp_path: Path) -> None:
    script = write_script(tmp_path, "groups.py", ADD_GROUP)
    plain = _plain(tmp_path, "groups.py", ADD_GROUP)
    store = tmp_path / "store"
    expected = _run(plain, store=tmp_path / "unused").stdout
    assert expected.splitlines()[0] == "2 True True"
    first = _run(script, store=store)
    assert first.stdout == expected and not _warnings(first)
    second = _run(script, store=store)
    assert _calls(second) == ["step hit", "unfreeze hit", "step hit", "step hit"]
    assert second.stdout == expected


UNSTORED = """
import threading
import torch
from memostore import memo


@memo
def attached(x):
    return x * 2          # with a grad_fn: never stored


@memo
def locked(n):
    return threading.Lock(), n   # cannot be stored at all


attached(torch.ones(2, requires_grad=True))
locked(1)
print("done")
"""


def test_completed_calls_are_never_listed_as_killed(tmp_path: Path) -> None:
    script = write_script(tmp_path, "unstored.py", UNSTORED)
    store = tmp_path / "store"
    _run(script, store=store)
    _run(script, store=store)
    listing = subprocess.run(
        [sys.executable, "-m", "memostore_cli.main", "--store", str(store), "log", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    statuses = [e["status"] for e in json.loads(listing.stdout)]
    assert "interrupted" not in statuses, statuses
    assert not list((store / "journal").glob("*.journal")), "a finished call left its journal"


def test_memostore_warnings_survive_silencing_user_warnings(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "quiet.py",
        """
        import threading
        import warnings
        from memostore import MemostoreWarning, memo

        warnings.filterwarnings("ignore", category=UserWarning)   # as Lightning users do
        assert not issubclass(MemostoreWarning, UserWarning)


        @memo
        def locked():
            return threading.Lock()


        locked()
        """,
    )
    proc = run_script(script, env={"MEMOSTORE_DIR": str(tmp_path / "store")})
    assert "MemostoreWarning" in proc.stderr and "is returned unstored" in proc.stderr


UNSEEDED = """
import torch
import torch.nn as nn
from memostore import memo

model = nn.Linear(3, 2)   # unseeded: other weights in every process


@memo
def evaluate(model, x):
    with torch.no_grad():
        return model(x).sum().item()


evaluate(model, torch.ones(1, 3))
"""


@pytest.mark.slow
def test_a_miss_from_weights_that_differ_run_to_run_is_named(tmp_path: Path) -> None:
    script = write_script(tmp_path, "unseeded.py", UNSEEDED)
    env = {**REPRODUCIBLE, "MEMOSTORE_DIR": str(tmp_path / "store")}  # default verbosity
    first = run_script(script, env=env)
    assert "MemostoreWarning" not in first.stderr
    second = run_script(script, env=env)
    warned = re.findall(r"MemostoreWarning: (.*)", second.stderr)
    assert len(warned) == 1, second.stderr
    assert "model.weight" in warned[0] and "unseeded RNG" in warned[0]


TRAINED_THEN_EVALUATED = """
import sys
import torch
import torch.nn as nn
from memostore import memo


@memo
def train(lr):
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.mul_(lr)
    return model


@memo
def evaluate(model, x):
    with torch.no_grad():
        return model(x).sum().item()


evaluate(train(float(sys.argv[1])), torch.ones(1, 3))
"""


def test_a_model_another_memoised_call_made_is_not_named_as_unseeded(tmp_path: Path) -> None:
    """Another learning rate trains other weights: a miss of evaluate, and no warning."""
    script = write_script(tmp_path, "trained.py", TRAINED_THEN_EVALUATED)
    env = {**REPRODUCIBLE, "MEMOSTORE_DIR": str(tmp_path / "store")}
    run_script(script, "1.0", env=env)
    second = run_script(script, "3.0", env=env)
    assert "MemostoreWarning" not in second.stderr, second.stderr


def _trainer_example() -> str:
    """The Hugging Face Trainer example of docs/logging.md, as a user copies it."""
    text = (REPO / "docs" / "logging.md").read_text()
    section = text[text.index("### Hugging Face Trainer") :]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    return block.group(1)


@pytest.mark.slow
def test_the_trainer_example_of_the_logging_docs_hits_as_written(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    pytest.importorskip("tensorboard")
    source = _trainer_example() + "print(sum(v.sum().item() for v in state.values()))\n"
    script = write_script(tmp_path, "trainer.py", source)
    store = tmp_path / "store"
    first = _run(script, store=store)
    second = _run(script, store=store)
    assert _calls(first) == ["train miss"]
    assert _calls(second) == ["train hit"]
    assert first.stdout.splitlines()[-1] == second.stdout.splitlines()[-1]
