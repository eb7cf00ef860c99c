"""The Ray engine (`engine="ray"`, extra `agenter-sdk[ray]`): each task is a Ray task that makes
its workspace on the worker, runs the agent there and returns its row; the driver writes rows as
they arrive. Imported only when the Ray engine is chosen.

Without an address a local cluster is started (and shut down at the end); with one, the driver
joins that cluster. If this process already joined a cluster (ray.init before run_batch), that
one is used and left running. A worker lost mid-task (killed, out of memory, node gone) is
retried by Ray up to `max_retries` times; after that the task's row says `worker_lost`.

A paused task is continued (run_batch's `approve`) on the node that ran it, where its workspace
is (the row's `worker.node`); when that node is gone, or the continuation is lost with its
worker, the row stays paused and says why.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agenter._errors import RequirementError
from agenter.batch._models import BatchRow, BatchTask, RayOptions, TaskCap, TaskDefaults
from agenter.batch._results import crash_row
from agenter.batch._runner import RunSettings, approve_task, run_task

#: Ray failures that mean the worker (or its node) went away, not that the task failed.
_LOST = ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError", "LocalRayletDiedError", "ObjectLostError",
         "OwnerDiedError")


def import_ray() -> Any:
    """The ray module, or a RequirementError naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise RequirementError("the Ray engine needs ray: pip install 'agenter-sdk[ray]'",
                               missing=["ray"]) from None
    return ray


def _task_on_worker(task_data: dict[str, Any], shared: tuple[TaskDefaults, RunSettings],
                    cap: TaskCap | None) -> dict[str, Any]:
    """The Ray task: the whole task on the worker, returning its row as JSON data."""
    import ray

    defaults, settings = shared
    task = BatchTask.model_validate(task_data)
    row = asyncio.run(run_task(task, defaults, settings, cap=cap))
    row.worker["node"] = ray.get_runtime_context().get_node_id()
    return row.model_dump(mode="json")


def _approve_on_worker(task_data: dict[str, Any], shared: tuple[TaskDefaults, RunSettings],
                       paused_data: dict[str, Any], answers: Any) -> dict[str, Any]:
    """The Ray task that continues a paused task on the node its workspace is on."""
    import ray

    defaults, settings = shared
    task, paused = BatchTask.model_validate(task_data), BatchRow.model_validate(paused_data)
    row = asyncio.run(approve_task(task, defaults, settings, paused, answers))
    row.worker["node"] = ray.get_runtime_context().get_node_id()
    return row.model_dump(mode="json")


class RayExecutor:
    """Submits each task as a Ray task and awaits its row (see the module docstring)."""

    def __init__(self, defaults: TaskDefaults, settings: RunSettings, options: RayOptions, *, concurrency: int):
        ray = self._ray = import_ray()
        self.options = options
        self._owns_cluster = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": options.log_to_driver,
                                      **options.init_kwargs}
            if options.address:
                ray.init(address=options.address, **kwargs)
            else:
                slots = {name: float(max(concurrency, amount)) for name, amount in options.resources_per_task.items()}
                # Ray keeps as many idle workers as CPUs and ends the rest; with fractional CPUs per
                # task most tasks would then wait for a fresh Python process to start.
                kwargs.setdefault("_system_config", {"num_workers_soft_limit": max(concurrency, options.num_cpus or 0)})
                ray.init(address="local", num_cpus=options.num_cpus, resources=slots or None, **kwargs)
            self._owns_cluster = True
        self._remote = ray.remote(_task_on_worker).options(
            num_cpus=options.num_cpus_per_task, resources=dict(options.resources_per_task) or None,
            max_retries=options.max_retries, retry_exceptions=False, name="agenter-batch-task")
        self._approve = ray.remote(_approve_on_worker)
        self._shared = ray.put((defaults, settings))

    async def run(self, task: BatchTask, cap: TaskCap | None, on_cost: Any) -> BatchRow:
        ref = self._remote.remote(task.model_dump(mode="json"), self._shared, cap)
        try:
            data = await ref
        except asyncio.CancelledError:
            self._ray.cancel(ref, force=True)
            raise
        except self._ray.exceptions.RayError as exc:
            lost = type(exc).__name__ in _LOST or isinstance(exc, self._ray.exceptions.ObjectLostError)
            row = crash_row(task, exc, "worker_lost" if lost else "crash")
            if lost:
                row.error = (f"the worker running this task was lost {self.options.max_retries + 1} time(s) "
                             f"({type(exc).__name__})")
            return row
        return BatchRow.model_validate(data)

    async def approve(self, task: BatchTask, paused: BatchRow, answers: Any, on_cost: Any) -> BatchRow:
        placement: dict[str, Any] = {}
        node = paused.worker.get("node")
        if node:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            placement["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        remote = self._approve.options(
            num_cpus=self.options.num_cpus_per_task, resources=dict(self.options.resources_per_task) or None,
            max_retries=self.options.max_retries, retry_exceptions=False, name="agenter-batch-approve", **placement)
        ref = remote.remote(task.model_dump(mode="json"), self._shared, paused.model_dump(mode="json"), answers)
        try:
            data = await ref
        except asyncio.CancelledError:
            self._ray.cancel(ref, force=True)
            raise
        except self._ray.exceptions.RayError as exc:
            return paused.model_copy(update={"error": f"not continued: the Ray task failed ({type(exc).__name__}: "
                                                      f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''})",
                                             "error_kind": "approve"})
        return BatchRow.model_validate(data)

    async def close(self) -> None:
        if self._owns_cluster:
            self._ray.shutdown()
