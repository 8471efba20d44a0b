"""What TensorBoard shows of a log directory, read through its own data provider and plugins.

The scalars are read as TensorBoard's scalars dashboard reads them (its
multiplexer and data provider, every point kept); the hyper-parameters as its
HParams tab lists them (the plugin's own ``get_experiment`` and
``list_session_groups`` handlers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _provider(logdir: Path) -> tuple[Any, Any]:
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem

    multiplexer = pem.EventMultiplexer(tensor_size_guidance={"scalars": 0})
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    return multiplexer, data_provider.MultiplexerDataProvider(multiplexer, str(logdir))


def scalars(logdir: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """run -> tag -> [(step, value)], as the scalars dashboard has them."""
    from tensorboard import context

    _, provider = _provider(logdir)
    ctx = context.RequestContext()
    listed = provider.list_scalars(ctx, experiment_id="", plugin_name="scalars")
    wanted = {run: list(tags) for run, tags in listed.items()}
    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for run, tags in wanted.items():
        read = provider.read_scalars(
            ctx,
            experiment_id="",
            plugin_name="scalars",
            downsample=10**9,
            run_tag_filter=_filter(run, tags),
        )
        out[run] = {tag: [(d.step, d.value) for d in data] for tag, data in read[run].items()}
    return out


def _filter(run: str, tags: list[str]) -> Any:
    from tensorboard.data import provider

    return provider.RunTagFilter(runs=[run], tags=tags)


def sessions(logdir: Path) -> dict[str, Any]:
    """The HParams tab: its columns and each session group with its values.

    Returns:
        ``{"hparams": {name: type name}, "metrics": [tag], "groups": [{"name",
        "hparams": {name: value}, "metrics": {tag: value}}]}``.
    """
    from tensorboard import context
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import (
        api_pb2,
        backend_context,
        get_experiment,
        list_session_groups,
    )

    multiplexer, provider = _provider(logdir)
    tb = base_plugin.TBContext(data_provider=provider, multiplexer=multiplexer, logdir=str(logdir))
    hp = backend_context.Context(tb)
    ctx = context.RequestContext()
    experiment = get_experiment.Handler(ctx, hp, "", api_pb2.GetExperimentRequest()).run()
    request = api_pb2.ListSessionGroupsRequest(
        allowed_statuses=[
            api_pb2.STATUS_UNKNOWN,
            api_pb2.STATUS_SUCCESS,
            api_pb2.STATUS_FAILURE,
            api_pb2.STATUS_RUNNING,
        ],
        start_index=0,
        slice_size=10_000,
    )
    for info in experiment.hparam_infos:
        request.col_params.add(hparam=info.name)
    for info in experiment.metric_infos:
        request.col_params.add(metric=info.name)
    groups = list_session_groups.Handler(ctx, hp, "", request).run()
    return {
        "hparams": {i.name: api_pb2.DataType.Name(i.type) for i in experiment.hparam_infos},
        "metrics": sorted(i.name.tag for i in experiment.metric_infos),
        "groups": [
            {
                "name": g.name,
                "hparams": {k: _value(v) for k, v in g.hparams.items()},
                "metrics": {m.name.tag: m.value for m in g.metric_values},
            }
            for g in groups.session_groups
        ],
    }


def _value(value: Any) -> Any:
    kind = value.WhichOneof("kind")
    return getattr(value, kind) if kind else None
