"""A sharded (FSDP2) model stored and restored by memostore, against torch.distributed.checkpoint.

One ``torchrun --standalone --nproc_per_node 2`` job on gloo (CPU), one
machine, every file in one temporary directory:

1. **Store and restore.** A model of ``--layers`` linear layers of
   ``--dim`` x ``--dim`` float32 parameters, ``fully_shard``-ed layer by layer
   (about 200 MB per rank by default). memostore: a miss of a memoised call
   returning the model (the ranks compare their results, each stores its own
   shard: every byte hashed and written, fsynced), then a hit of it (the
   decision, then each rank restores its shard, FSDP applied again).
   DCP: ``dcp.save`` of ``model.state_dict()`` with a ``FileSystemWriter``
   (one file per rank, fsynced), and ``dcp.load`` of it into a model built
   beforehand (the build not timed: DCP needs it, a memostore hit does not).
   Each round changes every parameter first, so no run finds its bytes
   stored already; the candidates run in rotation, each timed between two
   barriers (the slower rank's time), medians of ``--runs`` rounds.
2. **Fine-tuning checkpoints.** The same model with its layers frozen and a
   trainable head (``--head`` outputs), an AdamW over the head: five times a
   training step, then a checkpoint of (model, optimizer) by memostore (one
   memoised call per checkpoint) and by DCP (``get_state_dict``, one
   directory per checkpoint). The sizes on disk: memostore stores the frozen
   shards once, DCP writes them five times.

Run from the repository root: ``python benchmarks/bench_sharded.py``
(``--layers 4 --dim 2048`` for a quick one).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from _common import result

WORKER = textwrap.dedent(
    """\
    import os, shutil, statistics, sys, time
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard
    from memostore import memo

    layers, dim, head, runs = (int(a) for a in sys.argv[1:5])
    root = sys.argv[5]
    dist.init_process_group("gloo")
    rank = dist.get_rank()


    class Net(torch.nn.Module):
        def __init__(self, head_out):
            super().__init__()
            self.layers = torch.nn.ModuleList(
                [torch.nn.Linear(dim, dim, bias=False) for _ in range(layers)]
            )
            self.head = torch.nn.Linear(dim, head_out) if head_out else None

        def forward(self, x):
            for layer in self.layers:
                x = layer(x).relu()
            return self.head(x) if self.head is not None else x


    def build(head_out=0):
        torch.manual_seed(0)
        model = Net(head_out)
        for layer in model.layers:
            fully_shard(layer)
        fully_shard(model)
        return model


    @memo(ignore=("value",))
    def checkpoint(tag, value):
        return value


    def timed(fn):
        dist.barrier()
        start = time.perf_counter()
        fn()
        dist.barrier()
        return time.perf_counter() - start


    def size(path):
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


    def say(line):
        if rank == 0:
            print(line, flush=True)


    from pathlib import Path
    root = Path(root)
    model = build()
    target = build()  # what dcp.load loads into
    local = sum(p.to_local().numel() * 4 for p in model.parameters())
    say(f"LOCAL_BYTES {local}")
    times = {"store": [], "hit": [], "save": [], "load": []}
    for run in range(runs + 1):  # the first round warms up (imports, first FSDP restore)
        with torch.no_grad():
            for p in model.parameters():
                p.to_local().add_(1.0)  # new bytes each round: nothing is stored already
        os.environ["MEMOSTORE_DIR"] = str(root / f"store{run}")
        path = root / f"dcp{run}"
        t = {
            "store": timed(lambda: checkpoint(run, model)),
            "hit": timed(lambda: checkpoint(run, None)),
            "save": timed(lambda: dcp.save({"model": model.state_dict()},
                                           storage_writer=dcp.FileSystemWriter(path))),
            "load": timed(lambda: dcp.load({"model": target.state_dict()},
                                           storage_reader=dcp.FileSystemReader(path))),
        }
        dist.barrier()
        if rank == 0:
            shutil.rmtree(root / f"store{run}")
            shutil.rmtree(path)
        if run:
            for name, seconds in t.items():
                times[name].append(seconds)
    for name, values in times.items():
        say(f"TIME {name} {statistics.median(values)}")
    del model, target

    # Fine-tuning: a frozen base, a trainable head, five checkpoints.
    model = build(head)
    for layer in model.layers:
        layer.requires_grad_(False)
    opt = torch.optim.AdamW(model.head.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(rank)
    os.environ["MEMOSTORE_DIR"] = str(root / "finetune")
    for step in range(5):
        model(torch.randn(4, dim, generator=data)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        checkpoint(f"step{step}", (model, opt))
        model_sd, optim_sd = get_state_dict(model, opt)
        dcp.save({"model": model_sd, "optim": optim_sd},
                 storage_writer=dcp.FileSystemWriter(root / f"finetune-dcp{step}"))
    dist.barrier()
    if rank == 0:
        say(f"SIZE memostore {size(root / 'finetune')}")
        say(f"SIZE dcp {sum(size(root / f'finetune-dcp{s}') for s in range(5))}")
    dist.destroy_process_group()
    """
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--dim", type=int, default=3584, help="8 x 3584^2 floats: 205 MB a rank")
    parser.add_argument("--head", type=int, default=512, help="trainable head outputs")
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    torchrun = Path(sys.executable).with_name("torchrun")
    with tempfile.TemporaryDirectory() as tmp:
        worker = Path(tmp) / "worker.py"
        worker.write_text(WORKER)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        args = [str(a) for a in (options.layers, options.dim, options.head, options.runs)]
        command = [str(torchrun), "--standalone", "--nproc_per_node", "2", str(worker)]
        proc = subprocess.run(
            [*command, *args, str(Path(tmp) / "data")], capture_output=True, text=True, env=env
        )
    if proc.returncode != 0:
        raise SystemExit(f"the job failed:\n{proc.stdout}\n{proc.stderr}")
    times = {m[0]: float(m[1]) for m in re.findall(r"^TIME (\w+) (\S+)$", proc.stdout, re.M)}
    sizes = {m[0]: int(m[1]) for m in re.findall(r"^SIZE (\w+) (\d+)$", proc.stdout, re.M)}
    local = int(re.search(r"^LOCAL_BYTES (\d+)$", proc.stdout, re.M).group(1))  # type: ignore[union-attr]
    what = f"FSDP2 model, {local / 1e6:.0f} MB a rank, 2 gloo ranks"
    print(
        f"{what}: store {times['store']:.3f} s (dcp.save {times['save']:.3f} s), "
        f"restore {times['hit']:.3f} s (dcp.load {times['load']:.3f} s); fine-tuning, five "
        f"checkpoints: memostore {sizes['memostore'] / 1e6:.0f} MB, DCP {sizes['dcp'] / 1e6:.0f} "
        f"MB ({(sizes['dcp'] - sizes['memostore']) / 1e6:.0f} MB saved)",
        flush=True,
    )
    result(
        "sharded.store",
        f"Store a sharded model on a miss ({what})",
        ours=times["store"],
        kind="max",
        limit=1.2,
        baseline=times["save"],
        baseline_name="dcp.save (FileSystemWriter)",
        note=f"median of {options.runs} rounds; the ranks compare results, each stores its shard",
    )
    result(
        "sharded.restore",
        f"Restore it on a hit ({what})",
        ours=times["hit"],
        kind="max",
        limit=1.0,
        baseline=times["load"],
        baseline_name="dcp.load (FileSystemReader) into a model built beforehand",
        note="the hit includes the decision and applying fully_shard again",
    )
    result(
        "sharded.finetune_size",
        f"Store size of 5 fine-tuning checkpoints, frozen base, trainable head ({what})",
        ours=sizes["memostore"] / 1e6,
        kind="max",
        limit=0.3,
        baseline=sizes["dcp"] / 1e6,
        baseline_name="DCP's",
        unit="MB",
        note=f"{(sizes['dcp'] - sizes['memostore']) / 1e6:.0f} MB saved: the frozen shards "
        "are stored once",
    )


if __name__ == "__main__":
    main()
