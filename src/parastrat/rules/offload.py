"""The rules of CPU activation offloading, written once (Megatron Core's own checks).

Megatron Core's ``TransformerConfig.__post_init__`` (megatron-core 0.16.1,
``megatron/core/transformer/transformer_config.py``) refuses ``cpu_offloading`` with
``cpu_offloading_num_layers`` outside ``[0, num_layers)`` ("CPU offloading can be done only for
layers less than ..."), with ``pipeline_model_parallel_size > 1`` ("Currently there is no support
for Pipeline parallelism with CPU offloading"), with any ``recompute_granularity`` ("CPU
offloading does not work when activation recomputation is enabled") and with CUDA graphs
(``cuda_graph_impl != "none"``: "CUDA graphs not supported with CPU offloading").  Transformer
Engine's ``get_cpu_offload_context`` asserts the same layer bound ("Cannot offload all layers
... last layer is not offloaded").  Two more rules are parastrat's, from the device: a host
link to move the activations over (``Accelerator.host_link_Bps``) and host memory to hold them
(``Accelerator.host_memory_bytes``).

Each function returns :class:`~parastrat.errors.Violation` s (never raises), as
:mod:`parastrat.rules` does; ids are documented in ``docs/troubleshooting.md``.
"""

from __future__ import annotations

from typing import Any

from ..errors import Violation
from .violations import err

GB = 1e9


def offload_violations(
    num_layers: int,
    strategy: Any,
    layers: int,
    recompute: str,
    cuda_graphs: Any = (),
    hybrid: bool = False,
) -> list[Violation]:
    """What Megatron Core refuses about offloading ``layers`` of ``num_layers`` transformer
    layers with ``strategy`` (its ``pp``), the recompute mode priced and the CUDA-graph scopes
    (empty: eager), for a GPT or (``hybrid``) a Mamba hybrid.  Nothing when ``layers`` is 0."""
    if not layers:
        return []
    return _model_violations(num_layers, layers, hybrid) + _run_violations(
        strategy, recompute, cuda_graphs
    )


def _model_violations(num_layers: int, layers: int, hybrid: bool) -> list[Violation]:
    """What the model refuses: a hybrid's MambaStack offloads nothing; the last layer stays."""
    out = []
    if hybrid:
        out.append(
            err(
                "cpu-offload-hybrid",
                f"cpu_offload_layers={layers} on a hybrid (Mamba) model: Megatron Core's "
                "MambaStack (megatron/core/ssm/mamba_block.py) wraps no layer in the CPU-offload "
                "context that TransformerBlock uses, so nothing would be offloaded",
                "use cpu_offload_layers=0 (recompute='selective' or more tensor/context "
                "parallelism to fit the activations)",
            )
        )
    if layers >= num_layers:
        out.append(
            err(
                "cpu-offload-layers",
                f"cpu_offload_layers={layers} with {num_layers} layers: Megatron offloads at "
                f"most num_layers - 1 = {num_layers - 1} (the last layer's activations are "
                "needed at once by its backward)",
                f"use cpu_offload_layers <= {num_layers - 1}",
            )
        )
    return out


def _run_violations(strategy: Any, recompute: str, cuda_graphs: Any) -> list[Violation]:
    """What the run settings refuse: pipeline parallelism, recomputation, CUDA graphs."""
    out = []
    if strategy.pp > 1:
        out.append(
            err(
                "cpu-offload-pp",
                f"CPU activation offloading with pp={strategy.pp}: Megatron Core has no "
                "support for pipeline parallelism with CPU offloading",
                "use pp=1 (with fsdp='optim_grads_params' to shard the weights, as Megatron "
                "Bridge's Llama 3 70B GB200/GB300 recipes do), or cpu_offload_layers=0",
            )
        )
    if recompute != "none":
        out.append(
            err(
                "cpu-offload-recompute",
                f"CPU activation offloading with recompute={recompute!r}: Megatron Core "
                "refuses offloading when activation recomputation is enabled",
                "use recompute='none' with cpu_offload_layers, or cpu_offload_layers=0 to "
                "recompute instead",
            )
        )
    if cuda_graphs:
        out.append(
            err(
                "cpu-offload-cuda-graphs",
                f"CPU activation offloading with CUDA graphs ({', '.join(sorted(cuda_graphs))}): "
                "Megatron Core refuses CUDA graphs with CPU offloading",
                "use cuda_graphs=None (eager) with cpu_offload_layers, or cpu_offload_layers=0",
            )
        )
    return out


def host_violations(
    accel: Any, layers: int, host_bytes: float, fitting_layers: int | None = None
) -> list[Violation]:
    """What the device cannot do: no known host link (``accel.host_link_Bps`` None), or
    ``host_bytes`` offloaded per device beyond ``accel.host_memory_bytes``
    (``fitting_layers``: the most layers that would fit, for the hint)."""
    if not layers:
        return []
    if accel.host_link_Bps is None:
        return [
            err(
                "cpu-offload-host-link",
                f"CPU activation offloading on {accel.name}: no source for its host link "
                "bandwidth, so the transfers cannot be priced",
                "use cpu_offload_layers=0 (recompute instead), or an Accelerator with "
                "host_link_Bps set to a measured host<->device rate",
            )
        ]
    cap = accel.host_memory_bytes
    if cap is not None and host_bytes > cap:
        fix = (
            f"use cpu_offload_layers <= {fitting_layers}"
            if fitting_layers
            else "use cpu_offload_layers=0 (recompute instead)"
        )
        return [
            err(
                "cpu-offload-host-memory",
                f"offloading {layers} layers keeps {host_bytes / GB:.1f} GB of activations per "
                f"device in host memory, more than the {cap / GB:.0f} GB share of "
                f"{accel.name}'s host",
                fix + ", or a smaller micro_batch_size",
            )
        ]
    return []


def applied_violations(model: Any, strategy: Any, run: Any) -> list[Violation]:
    """:func:`offload_violations` of what ``apply`` is about to write: a Megatron config's
    ``model`` (its ``num_layers``) and the run settings of a candidate priced with offloading
    (``run.cpu_offload_layers``; nothing for a bare strategy or without offloading)."""
    layers = getattr(run, "cpu_offload_layers", None) if run is not None else None
    if not layers:
        return []
    num_layers = getattr(model, "num_layers", None)
    graphs = run.cuda_graphs if run.cuda_graphs_known and run.cuda_graphs else ()
    return offload_violations(
        num_layers if isinstance(num_layers, int) else layers + 1,
        strategy,
        layers,
        run.recompute or "none",
        graphs,
        hybrid=bool(getattr(model, "hybrid_override_pattern", None)),
    )
