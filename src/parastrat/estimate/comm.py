"""Communication volumes of each parallelism, per layer, micro-batch or step.

This module says *what* each strategy sends (which collective, how many bytes, over how many
ranks, and whether the group stays inside one NVLink/HCCS domain); the price always comes from
:meth:`parastrat.Cluster.collective_time` (the single alpha-beta model, calibratable by
``parastrat bench``).  The step-time model decides how much of each is hidden behind compute.

Volumes (Korthikanti et al. 2022; Megatron Core's implementations), with ``T = b s / cp``
tokens of one micro-batch on a CP rank and ``B`` bytes per activation element (BF16: 2):

* TP with SP: per layer, forward all-gather + reduce-scatter around attention and around the
  MLP (each of ``T h B``, the full array), and the same again in backward (4 + 4).  Without
  SP: 2 all-reduces forward, 2 backward.  An MoE layer keeps the pair around attention (and
  around the shared experts); routed experts with ETP > 1 gather their routed tokens instead.
* CP ring (p2p): the local K and V blocks travel ``ring - 1`` hops forward; backward sends
  K, V and their gradients (``2 (ring - 1)`` hops).  CP a2a (Ulysses): all-to-all of Q, K, V
  before and of the output after attention, forward and backward.
* EP: dispatch and combine all-to-all of ``T/tp * topk * h * B`` per MoE layer, forward and
  backward.
* PP: a send of ``T/tp * h * B`` per virtual-stage boundary per micro-batch in each direction.
* DP: reduce-scatter of the stage's gradients and all-gather of its parameters once per step
  (distributed optimizer), or one all-reduce; dense parameters over the DP x CP group, expert
  parameters over the expert-DP group.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from ..grid import RankGrid, training_grid
from ..spec.model import ModelSpec
from .layers import MAIN_GRAD_BYTES
from .mamba import cp_exchange_elements

if TYPE_CHECKING:
    from ..spec.cluster import Cluster
    from ..strategy import Strategy

#: Bytes per activation / gradient element on the wire (BF16).
ACT_BYTES = 2
#: Bytes per gradient element in the DP reduce-scatter: BF16 (Megatron's
#: ``grad_reduce_in_fp32=False``, the default of ``Switches``); FP32 with it on
#: (:func:`grad_wire_bytes`).
GRAD_BYTES = MAIN_GRAD_BYTES[False]
#: Bytes per parameter element in the distributed optimizer's parameter all-gather (BF16).
PARAM_BYTES = 2


@dataclass(frozen=True)
class Collective:
    """One collective ``count`` times: ``op`` of ``nbytes`` (full array) over ``group_size``
    ranks that are ``stride`` ranks apart."""

    kind: str  # tp, cp, ep, etp, pp, dp, edp
    op: str
    nbytes: float
    group_size: int
    stride: int = 1
    count: float = 1.0
    #: all-to-all only: bytes that cross the scale-out link, relative to one copy per remote
    #: peer (< 1 when a dispatcher sends a token once per destination domain, see
    #: :func:`dedup_scale`)
    remote_scale: float = 1.0
    #: all-to-all only: bytes between ranks of one scale-up domain, relative to one copy per
    #: routed expert (< 1 when a dispatcher sends a token once per destination rank)
    local_scale: float = 1.0

    def time(self, cluster: Cluster) -> float:
        """Seconds for all ``count`` repetitions, priced by the cluster's alpha-beta model."""
        if self.count <= 0:
            return 0.0
        if self.group_size <= 1 and self.op not in ("ring", "send_recv"):
            return 0.0
        n = self.group_size
        span = cluster.span(n, self.stride)
        if self.op == "all_to_all" and span == "inter":
            return self.count * _split_all_to_all(
                cluster, self.nbytes, n, self.stride, self.remote_scale, self.local_scale
            )
        nbytes = self.nbytes * self.local_scale if self.op == "all_to_all" else self.nbytes
        return self.count * cluster.collective_time(self.op, nbytes, n, span)


def _split_all_to_all(
    cluster: Cluster,
    nbytes: float,
    n: int,
    stride: int,
    remote_scale: float = 1.0,
    local_scale: float = 1.0,
) -> float:
    """An all-to-all whose group spans scale-up domains.

    Of the ``n - 1`` peers of a rank, ``local - 1`` share its domain (the worst-placed rank's,
    :meth:`Cluster.local_peers`: a group straddling two NVL72 segments); only the rest of its
    data crosses the scale-out link (NCCL sends each peer's slice directly), while the local
    slices move over NVLink/HCCS at the same time.  Both parts are priced by
    ``collective_time`` with the bytes that really take that link: the slower one wins.
    ``remote_scale`` / ``local_scale`` scale the two parts for a de-duplicating dispatcher.
    """
    local = cluster.local_peers(n, stride)
    remote = n - local
    if remote <= 0:
        return cluster.collective_time("all_to_all", nbytes, n, "intra")
    # collective_time charges nbytes * (n-1)/n; scale so that exactly the remote share crosses
    inter = cluster.collective_time(
        "all_to_all", nbytes * remote_scale * remote / (n - 1), n, "inter"
    )
    intra = cluster.collective_time(
        "all_to_all", nbytes * local_scale * (local - 1) / (n - 1), n, "intra"
    )
    return max(inter, intra)


def total_time(items: list[Collective], cluster: Cluster) -> float:
    """Sum of :meth:`Collective.time` over ``items``."""
    return sum(c.time(cluster) for c in items)


# ---------------------------------------------------------------------------------------------
# Rank strides of each group, read from the strategy's rank grid (parastrat.grid).
# ---------------------------------------------------------------------------------------------
#: Group kind -> (grid view, axes) whose stride prices that kind's collectives.
_STRIDE_AXES: dict[str, tuple[str | None, str]] = {
    "tp": (None, "tp"),
    "cp": (None, "cp"),
    "dp": (None, "dp"),
    "pp": (None, "pp"),
    "dp-cp": (None, "dp-cp"),
    "etp": ("expert", "etp"),
    "ep": ("expert", "ep"),
    "edp": ("expert", "edp"),
    "ulysses": ("sequence", "ulysses"),
    "ring": ("sequence", "ring"),
    "dp_shard": ("fsdp", "dp_shard"),
    "dp_replicate": ("fsdp", "dp_replicate"),
    "dp_shard-cp": ("fsdp", "dp_shard-cp"),
}


def group_strides(strategy: Strategy, dp: int, edp: int | None = None) -> dict[str, int]:
    """Rank stride of every group kind for a training ``strategy`` on ``dp`` data-parallel
    replicas (its dense, expert, sequence and FSDP views; ``edp`` follows from the grid and is
    accepted for older callers).  A fresh dict; the grids behind it are memoised."""
    s = strategy
    return dict(_strides(s.order, s.tp, s.cp, s.ep, s.etp, s.pp, s.ulysses, dp, s.dp_replicate))


@lru_cache(maxsize=1 << 16)
def _strides(
    order: str, tp: int, cp: int, ep: int, etp: int, pp: int, uly: int, dp: int, rep: int
) -> tuple[tuple[str, int], ...]:
    grid = training_grid(order, tp, cp, ep, etp, pp, tp * cp * pp * dp, uly, rep)
    views: dict[str | None, RankGrid] = {None: grid, **dict(grid.views)}
    return tuple((kind, views[view].stride(axes)) for kind, (view, axes) in _STRIDE_AXES.items())


# ---------------------------------------------------------------------------------------------
# Per layer and micro-batch.
# ---------------------------------------------------------------------------------------------
def tp_layer(
    model: ModelSpec,
    strategy: Strategy,
    tokens: float,
    moe: bool | str,
    strides: dict[str, int],
    gather_bytes: float = ACT_BYTES,
) -> list[Collective]:
    """TP (and ETP) collectives of one layer for one micro-batch, forward + backward.

    ``tokens`` is ``b * s / cp`` (the sequence one CP rank holds, before SP sharding);
    ``gather_bytes``: bytes per element of the SP all-gathers (quantised ones under FP8,
    :func:`parastrat.estimate.fp8.gather_bytes`; the reduce-scatters stay at ``ACT_BYTES``);
    ``moe``: a GPT layer's MoE flag, or a hybrid layer's kind (one block: a Mamba mixer,
    attention or an MLP has one gather/scatter pair, like attention: ``MambaMixer``'s in_proj
    is column-, out_proj row-parallel; an MoE block has one for its shared experts).
    """
    t = strategy.tp
    out: list[Collective] = []
    full = tokens * model.hidden_size * ACT_BYTES
    if isinstance(moe, str):  # a hybrid layer's kind
        shared = bool(model.moe_shared_expert_intermediate_size)
        pairs = 1 if moe != "moe" else int(shared)
        moe = moe == "moe"
    else:
        # blocks that need a gather/scatter pair: attention, dense MLP or shared experts
        pairs = 1 + (1 if (not moe or model.moe_shared_expert_intermediate_size) else 0)
    if t > 1 and pairs:
        if strategy.sp:
            gathered = full * gather_bytes / ACT_BYTES
            out.append(Collective("tp", "all_gather", gathered, t, strides["tp"], 2 * pairs))
            out.append(Collective("tp", "reduce_scatter", full, t, strides["tp"], 2 * pairs))
        else:
            out.append(Collective("tp", "all_reduce", full, t, strides["tp"], 2 * pairs))
    if moe and strategy.etp > 1:
        routed = tokens / t * model.moe_router_topk * strategy.etp * model.hidden_size * ACT_BYTES
        out.append(Collective("etp", "all_gather", routed, strategy.etp, strides["etp"], 2))
        out.append(Collective("etp", "reduce_scatter", routed, strategy.etp, strides["etp"], 2))
    return out


def kv_width(model: ModelSpec, tp: int) -> float:
    """K plus V elements per token on one TP rank (what ring attention circulates)."""
    if model.multi_latent_attention:
        heads = model.num_attention_heads / tp
        return heads * (model.qk_head_dim + model.qk_pos_emb_head_dim + model.v_head_dim)
    groups = max(model.query_groups / tp, 1.0)
    return 2.0 * groups * model.head_dim


def qkvo_width(model: ModelSpec, tp: int) -> float:
    """Q, K, V and output elements per token on one TP rank (what Ulysses exchanges)."""
    heads = model.num_attention_heads / tp
    if model.multi_latent_attention:
        q = heads * (model.qk_head_dim + model.qk_pos_emb_head_dim)
        return q + kv_width(model, tp) + heads * model.v_head_dim
    return 2.0 * heads * model.head_dim + kv_width(model, tp)


#: All-to-alls ``MambaContextParallel`` runs per mixer forward: z, x, B, C, dt before the scan
#: and y after it (``pre_conv_ssm`` / ``post_conv_ssm``); the backward runs as many.
MAMBA_CP_A2A = 6


def cp_layer(
    model: ModelSpec,
    strategy: Strategy,
    tokens: float,
    strides: dict[str, int],
    kind: str | None = None,
) -> tuple[list[Collective], list[Collective]]:
    """CP collectives of one layer, one micro-batch: (ring p2p, overlappable; Ulysses a2a).
    ``kind``: a hybrid layer's kind: attention layers run context-parallel attention, Mamba
    layers ``MambaContextParallel``'s all-to-alls over the whole CP group (exposed: the scan
    waits for them), MLP and MoE layers none."""
    ring: list[Collective] = []
    a2a: list[Collective] = []
    if kind == "mamba" and strategy.cp > 1:
        per_token = cp_exchange_elements(model, strategy.tp, strategy.cp)
        nbytes = tokens * per_token * ACT_BYTES / MAMBA_CP_A2A  # the mean of the six
        cp, stride = strategy.cp, strides["cp"]
        a2a.append(Collective("cp", "all_to_all", nbytes, cp, stride, 2 * MAMBA_CP_A2A))
        return ring, a2a
    if kind is not None and kind != "attention":
        return ring, a2a
    if strategy.ring > 1:
        kv = tokens * kv_width(model, strategy.tp) * ACT_BYTES
        hops = strategy.ring - 1
        ring.append(Collective("cp", "ring", kv, strategy.ring, strides["ring"], 3 * hops))
    if strategy.ulysses > 1:
        nbytes = tokens * qkvo_width(model, strategy.tp) * ACT_BYTES
        a2a.append(Collective("cp", "all_to_all", nbytes, strategy.ulysses, strides["ulysses"], 2))
    return ring, a2a


# MoE token dispatchers (the names live in spec.workload.DISPATCHERS): Megatron's
# ``alltoall`` permutes a token into one row per routed expert before the all-to-all, so it
# sends one copy per expert; ``flex`` (DeepEP / HybridEP) sends it once per destination rank
# inside a scale-up domain (DeepEP's dispatch layout marks ``is_token_in_rank``; the receiver
# permutes to its local experts) and once per destination scale-up domain across the
# scale-out link (RDMA to one rank there, then NVLink forwarding).


def expected_groups_hit(
    num_experts: int,
    topk: int,
    groups: int,
    routing_groups: int | None = None,
    group_topk: int | None = None,
) -> float:
    """Expected number of ``groups`` (equal contiguous blocks of ``num_experts / groups``
    experts, e.g. the experts of one rank or of one scale-up domain) that a token's ``topk``
    distinct experts fall in, with uniform routing: ``G (1 - C(E - E/G, k) / C(E, k))``.

    With group-limited routing (``routing_groups`` R equal contiguous expert groups, at most
    ``group_topk`` T of them per token: DeepSeek's ``n_group`` / ``topk_group``) the token
    draws T of the R routing groups, then its ``k`` experts among their ``T E / R`` experts.
    A block that holds ``m`` whole routing groups is hit with probability
    ``sum_c P(c of its m groups drawn) (1 - C((T - c) E/R, k) / C(T E/R, k))``; a block inside
    one routing group with ``(T/R) (1 - C(T E/R - E/G, k) / C(T E/R, k))``.  Blocks that do
    not line up with the routing groups are priced as uniform routing.
    """
    from math import comb

    E, k, G = num_experts, topk, groups
    if G <= 1 or E < G or k < 1:
        return float(min(max(G, 1), max(k, 1)))
    per_block = E // G
    R, T = routing_groups or 0, group_topk or 0
    if R > 1 and 0 < T < R and E % R == 0 and (G % R == 0 or R % G == 0):
        per_group = E // R
        pool = T * per_group
        if G % R == 0:  # blocks inside one routing group
            miss = comb(pool - per_block, k) / comb(pool, k) if pool - per_block >= k else 0.0
            return G * (T / R) * (1.0 - miss)
        m = R // G  # routing groups per block
        hit = 0.0
        for c in range(1, min(m, T) + 1):
            drawn = comb(m, c) * comb(R - m, T - c) / comb(R, T)
            rest = pool - c * per_group
            miss = comb(rest, k) / comb(pool, k) if rest >= k else 0.0
            hit += drawn * (1.0 - miss)
        return G * hit
    miss = comb(E - per_block, k) / comb(E, k) if E - per_block >= k else 0.0
    return G * (1.0 - miss)


def dedup_scale(
    num_experts: int,
    topk: int,
    groups: int,
    routing_groups: int | None = None,
    group_topk: int | None = None,
) -> float:
    """Bytes of a once-per-group dispatch relative to once-per-expert (``groups`` equal blocks
    of experts): :func:`expected_groups_hit` over ``topk``.  By symmetry the same ratio holds
    for the copies that go to other groups.

    With ranks as the groups it is the NVLink saving of DeepEP/HybridEP's once-per-rank
    dispatch; with scale-up domains, the NIC saving of their once-per-node RDMA copy
    (DeepSeek-V3 report, section 3.2.2), lower still under node-limited routing.
    """
    if groups <= 1 or num_experts < groups or topk < 1:
        return 1.0
    hit = expected_groups_hit(num_experts, topk, groups, routing_groups, group_topk)
    return min(1.0, hit / topk)


def ep_layer(
    model: ModelSpec,
    strategy: Strategy,
    tokens: float,
    strides: dict[str, int],
    dispatcher: str = "alltoall",
    scale_up_domain: int | None = None,
) -> list[Collective]:
    """EP dispatch + combine all-to-all of one MoE layer, one micro-batch, forward + backward.

    ``dispatcher="flex"`` (DeepEP/HybridEP) sends each token once per destination rank inside
    a scale-up domain (``scale_up_domain`` ranks) and once per destination domain across the
    scale-out link, instead of once per routed expert: fewer bytes on both links.
    """
    if strategy.ep <= 1:
        return []
    routed = tokens / strategy.tp * model.moe_router_topk * model.hidden_size * ACT_BYTES
    remote = local = 1.0
    if dispatcher == "flex":
        E, k = model.num_experts, model.moe_router_topk
        limit = (model.moe_router_num_groups, model.moe_router_group_topk)
        local = dedup_scale(E, k, strategy.ep, *limit)
        if scale_up_domain:
            per_domain = max(1, min(strategy.ep, scale_up_domain // max(strides["ep"], 1)))
            remote = dedup_scale(E, k, -(-strategy.ep // per_domain), *limit)
    return [
        Collective(
            "ep",
            "all_to_all",
            routed,
            strategy.ep,
            strides["ep"],
            4,
            remote_scale=remote,
            local_scale=local,
        )
    ]


@dataclass(frozen=True)
class PipelineHops:
    """The transfers between consecutive pipeline stages on a cluster: ``hops`` per pass over
    the stages (the interleaved wrap from the last stage to the first included), ``crossing``
    of them on the scale-out link in the worst pipeline group, ``at_stage`` of the worst
    stage's two steady-state exchanges on it
    (:meth:`~parastrat.spec.cluster.Cluster.hop_crossings`), and one transfer's seconds on
    each link."""

    hops: int
    crossing: int
    at_stage: int
    inter_s: float
    intra_s: float

    @property
    def worst_s(self) -> float:
        """One exchange of the slowest stage, averaged over its two: what paces the steady
        state."""
        return (self.at_stage * self.inter_s + (2 - self.at_stage) * self.intra_s) / 2

    @property
    def mean_s(self) -> float:
        """One transfer on the mean hop: what the fill, which crosses every hop, pays."""
        return (
            self.crossing * self.inter_s + (self.hops - self.crossing) * self.intra_s
        ) / self.hops


def pipeline_hops(
    model: ModelSpec, strategy: Strategy, tokens: float, strides: dict[str, int], cluster: Cluster
) -> PipelineHops | None:
    """The pipeline's hops and their prices (None without a pipeline)."""
    p2p = pp_microbatch(model, strategy, tokens, strides)
    if p2p is None:
        return None
    wrap = strategy.vpp > 1
    inter, intra = (
        cluster.collective_time("send_recv", p2p.nbytes, 2, x) for x in ("inter", "intra")
    )
    crossings = cluster.hop_crossings(strategy.pp, p2p.stride, wrap)
    return PipelineHops(
        hops=strategy.pp - 1 + wrap,
        crossing=crossings.hops,
        at_stage=crossings.at_stage,
        inter_s=inter,
        intra_s=intra,
    )


def pp_microbatch(
    model: ModelSpec, strategy: Strategy, tokens: float, strides: dict[str, int]
) -> Collective | None:
    """One point-to-point transfer between pipeline stages (activation or its gradient)."""
    if strategy.pp <= 1:
        return None
    shard = strategy.tp if strategy.sp else 1
    nbytes = tokens / shard * model.hidden_size * ACT_BYTES
    return Collective("pp", "send_recv", nbytes, 2, strides["pp"], 1)


# ---------------------------------------------------------------------------------------------
# Per step.
# ---------------------------------------------------------------------------------------------
def grad_wire_bytes(grad_reduce_in_fp32: bool) -> float:
    """Bytes per gradient element reduced over data parallelism: the gradient buffer's dtype
    (Megatron reduces the buffer it accumulates into: FP32 with ``grad_reduce_in_fp32``)."""
    return MAIN_GRAD_BYTES[bool(grad_reduce_in_fp32)]


def dp_step(
    strategy: Strategy,
    dense_params: float,
    expert_params: float,
    dp: int,
    edp: int,
    strides: dict[str, int],
    distributed_optimizer: bool = True,
    grad_bytes: float = GRAD_BYTES,
) -> list[Collective]:
    """Gradient (and parameter) collectives of one step for one rank's local parameters
    (``grad_bytes`` per gradient element on the wire: :func:`grad_wire_bytes`)."""
    out: list[Collective] = []
    dense_group = dp * strategy.cp
    for params, group, stride, kind in (
        (dense_params, dense_group, strides["dp-cp"], "dp"),
        (expert_params, edp, strides["edp"], "edp"),
    ):
        if params <= 0 or group <= 1:
            continue
        if distributed_optimizer:
            out.append(Collective(kind, "reduce_scatter", params * grad_bytes, group, stride))
            out.append(Collective(kind, "all_gather", params * PARAM_BYTES, group, stride))
        else:
            out.append(Collective(kind, "all_reduce", params * grad_bytes, group, stride))
    return out
