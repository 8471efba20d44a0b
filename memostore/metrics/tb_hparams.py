"""Hyper-parameter events for ``export tensorboard``, as the HParams plugin reads them.

Two forms:

* :func:`session_events`: one ``add_hparams`` call, written into its own run
  exactly as torch's writer writes it (experiment, session start and end,
  the metrics' scalars being in that run's points);
* :func:`evaluation_events`: for an evaluation that called ``add_hparams``
  nowhere, the evaluation as one session of its main run: the call's scalar
  arguments (and hyper-parameters logged without a session, by older
  writers), the evaluation's start, end and status, its main run's scalars
  as metrics.

Imported only by :mod:`.tb_export`, once tensorboard is known to be there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .read import load_manifest, logged_hparams

if TYPE_CHECKING:
    from ..odb.store import Store

_STATUS = {"ok": "STATUS_SUCCESS", "error": "STATUS_FAILURE", "interrupted": "STATUS_ABORTED"}


def _value(p: Any, value: Any) -> Any:
    if isinstance(value, bool):
        return p.struct.Value(bool_value=value)
    if isinstance(value, (int, float)):
        return p.struct.Value(number_value=float(value))
    return p.struct.Value(string_value=str(value))


def _torch_value(p: Any, value: Any) -> Any:
    # torch's writer checks for numbers first: a bool is written as the number 1 or 0.
    if isinstance(value, (int, float)):
        return p.struct.Value(number_value=float(value))
    return p.struct.Value(string_value=str(value))


def _events(p: Any, contents: list[tuple[str, Any]], wall: float, step: int, tensor: bool) -> Any:
    meta = p.hp_metadata
    out = []
    for tag, data in contents:
        value = p.summary.Summary.Value(tag=tag, metadata=meta.create_summary_metadata(data))
        if tensor:
            value.tensor.CopyFrom(meta.NULL_TENSOR)
        event = p.event.Event(wall_time=wall, step=step, summary=p.summary.Summary(value=[value]))
        out.append((wall, event))
    return out


def session_events(p: Any, session: dict[str, Any]) -> list[tuple[float, Any]]:
    """``(wall, event)`` of one ``add_hparams`` session, as torch's writer writes them.

    Numbers (bools included, as torch's writer takes them) are FLOAT64
    hyper-parameters, the rest strings; the session ends with success and
    neither start nor end carries a time.
    """
    api, data = p.api, p.plugin_data
    meta = p.hp_metadata
    domains = session.get("domains") or {}
    start = data.SessionStartInfo()
    infos = []
    for name, value in session.get("hparams", {}).items():
        if value is None:
            continue
        start.hparams[name].CopyFrom(_torch_value(p, value))
        number = isinstance(value, (int, float))
        info = api.HParamInfo(
            name=name, type=api.DATA_TYPE_FLOAT64 if number else api.DATA_TYPE_STRING
        )
        if name in domains:
            info.domain_discrete.values.extend(_torch_value(p, x) for x in domains[name])
        infos.append(info)
    metrics = [api.MetricInfo(name=api.MetricName(tag=m)) for m in session.get("metrics", [])]
    experiment = api.Experiment(hparam_infos=infos, metric_infos=metrics)
    end = data.SessionEndInfo(status=api.STATUS_SUCCESS)
    version = meta.PLUGIN_DATA_VERSION
    contents = [
        (meta.EXPERIMENT_TAG, data.HParamsPluginData(experiment=experiment, version=version)),
        (
            meta.SESSION_START_INFO_TAG,
            data.HParamsPluginData(session_start_info=start, version=version),
        ),
        (meta.SESSION_END_INFO_TAG, data.HParamsPluginData(session_end_info=end, version=version)),
    ]
    wall = float(session.get("wall") or 0.0)
    return _events(p, contents, wall, int(session.get("step") or 0), tensor=False)


def evaluation_events(
    p: Any, store: Store, evaluation: Any, started: float, names: dict[str, str]
) -> list[tuple[float, Any]]:
    """``(wall, event)`` of the evaluation as one session of its run (*names*: its points).

    Its hyper-parameters are those ``add_hparams`` recorded and the call's
    scalar arguments (which win); its metrics those ``add_hparams`` named,
    else every scalar of the run.
    """
    logged = logged_hparams(store, evaluation.logs_id)
    hparams = {**logged["hparams"], **evaluation.hparams}
    if not hparams:
        return []
    entries = load_manifest(store, evaluation.logs_id).get("tags", {})
    metrics = [m for m in logged["metrics"] if m in names] or [
        tag for name, tag in names.items() if entries[name]["kind"] == "scalar"
    ]
    api, data = p.api, p.plugin_data
    infos = []
    for name, value in sorted(hparams.items()):
        info = api.HParamInfo(name=name)
        if isinstance(value, bool):
            info.type = api.DATA_TYPE_BOOL
        elif isinstance(value, (int, float)):
            info.type = api.DATA_TYPE_FLOAT64
        else:
            info.type = api.DATA_TYPE_STRING
        domain = logged["domains"].get(name)
        if domain:
            info.domain_discrete.values.extend(_value(p, x) for x in domain)
        infos.append(info)
    experiment = api.Experiment(
        hparam_infos=infos,
        metric_infos=[api.MetricInfo(name=api.MetricName(tag=m)) for m in metrics],
    )
    start = data.SessionStartInfo(start_time_secs=started)
    for name, value in hparams.items():
        start.hparams[name].CopyFrom(_value(p, value))
    end = data.SessionEndInfo(
        status=getattr(api, _STATUS.get(evaluation.status, "STATUS_UNKNOWN")),
        end_time_secs=started + float(evaluation.duration_s or 0.0),
    )
    meta = p.hp_metadata
    contents = [
        (meta.EXPERIMENT_TAG, data.HParamsPluginData(experiment=experiment)),
        (meta.SESSION_START_INFO_TAG, data.HParamsPluginData(session_start_info=start)),
        (meta.SESSION_END_INFO_TAG, data.HParamsPluginData(session_end_info=end)),
    ]
    return _events(p, contents, started, 0, tensor=True)
