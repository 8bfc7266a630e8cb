"""Which configuration settings a result's key covers.

A cell's key (:func:`madara_cli.experiment.grid.semantic_config`) and a probe's key
(:class:`madara_cli.diagnose.probe.ProbeSpec`) hash what can change the numbers. The
settings below only change speed or placement (threads, batch sizes, timeouts, GPU
memory share, tensor parallelism, server address), so they are left out of both: a
parallel run that sets threads finds the cells and probes a serial run wrote.

Kept here, in the config layer, so that every layer that derives a key reads the
same table without importing the experiment.
"""

from __future__ import annotations

# Settings inside a config group that only change speed or placement, by group.
RUNTIME_ONLY: dict[str, tuple[str, ...]] = {
    "backend": (
        "batch_size", "n_threads", "tensor_parallel_size", "gpu_memory_utilization", "enable_prefix_caching",
        "base_url", "api_key_env", "max_in_flight", "retries", "timeout_s",
    ),
}

