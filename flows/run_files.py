"""Where a run's files go: its own result path and output folder (`{run_id}` filled in), the judge's name
in its file names, the folder its shards' JSONL parts wait in until publishing, and, once it ends, `latest`
pointed at its folder or the folder marked FAILED. The judging flow (flows/judgebench_flow.py) calls these
around its run."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from judgebench_flows.core.config import RunConfig
from judgebench_flows.data import storage
from judgebench_flows.data.outputs import RUN_ID_FIELD, for_run, mark_failed, point_latest


def output_judge_name(config: RunConfig) -> str:
    """The judge's name in output file names: a custom judge is `custom_<Class>`, never its file path,
    which would put directories (or `..`) into the JSONL's file name."""
    if config.judge_template:
        return "custom_" + config.judge_template.rsplit(":", 1)[-1].replace("/", "_")
    return config.judge_type.replace(":", "_").replace("/", "_")


def with_run_paths(config: RunConfig, run_id: str) -> RunConfig:
    """The run's own result path and output folder (`{run_id}` in them replaced by its id)."""
    return config.model_copy(
        update={"result_path": for_run(config.result_path, run_id), "output_dir": for_run(config.output_dir, run_id)}
    )


def parts_folder(output_dir: str, run_id: str) -> Path:
    """Where the shards' JSONL parts wait for publishing: beside the outputs on a disk, in the system's
    temporary folder when the outputs go to an object store (parts are appended to, objects are not)."""
    if storage.is_url(output_dir):
        return Path(tempfile.gettempdir()) / "judgebench-parts" / run_id
    return Path(output_dir) / ".parts" / run_id


def remove_parts(parts_dir: Path) -> None:
    """The run's parts, and their `.parts` folder when no other run's parts are left in it: a finished
    run's folder holds its outputs only."""
    shutil.rmtree(parts_dir, ignore_errors=True)
    with contextlib.suppress(OSError):  # another run of the same output folder still writing its parts
        parts_dir.parent.rmdir()


def settle_folder(layout: str, folder: str, run_id: str, too_little: str | None) -> None:
    """A run folder of a per-run layout: `latest` names it when the run finished with results; a run that
    measured too little keeps its folder, marked FAILED with the reason, and `latest` stays where it was."""
    if not too_little:
        point_latest(layout, run_id)
    elif RUN_ID_FIELD in layout:
        mark_failed(folder, too_little)


__all__ = ["output_judge_name", "parts_folder", "remove_parts", "settle_folder", "with_run_paths"]
