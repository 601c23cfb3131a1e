"""The planner: legality, memory, ranking, pins, errors."""

import pytest

import parastrat as ps
from parastrat.errors import UsageError
from parastrat.planner.heuristics import seed_strategy
from parastrat.planner.search import enumerate_strategies, plan

LLAMA70 = ps.models.get("llama3-70b")
H100_64 = ps.Cluster("h100", num_devices=64)


@pytest.fixture(scope="module")
def result():
    return plan(LLAMA70, H100_64, seq_len=8192, global_batch_size=256, precision="fp8", top_k=5)


def test_candidates_are_legal_fit_and_ranked(result):
    assert result.best is result.candidates[0]
    # ranked by step time up to RANK_TIE: nothing is placed before a candidate that is more
    # than RANK_TIE faster than it
    from parastrat.planner.search import RANK_TIE

    times = [c.step.step_time_s for c in result.candidates]
    for i, t in enumerate(times):
        assert all(t <= later * (1 + RANK_TIE) for later in times[i + 1 :])
    for c in result.candidates:
        assert c.strategy.world_size == 64
        assert c.memory.fits(H100_64.accel)
        assert c.why
        c.strategy.validate(
            LLAMA70,
            world_size=64,
            seq_len=8192,
            global_batch_size=256,
            micro_batch_size=c.micro_batch_size,
        )


def test_best_beats_every_enumerated_fitting_strategy_sampled(result):
    # brute force over a pinned slice: the planner's best with tp=8 equals the best by hand
    from parastrat.estimate.memory import estimate_memory
    from parastrat.estimate.step import estimate_step

    pinned = plan(
        LLAMA70,
        H100_64,
        seq_len=8192,
        global_batch_size=256,
        precision="fp8",
        tp=8,
        micro_batch_size=1,
        recompute="full",
    )
    best = None
    for s in enumerate_strategies(LLAMA70, 64, 8192, 256, tp=8):
        mem = estimate_memory(
            LLAMA70, s, seq_len=8192, global_batch_size=256, recompute="full", precision="fp8"
        )
        if not mem.fits(H100_64.accel):
            continue
        t = estimate_step(
            LLAMA70,
            s,
            H100_64,
            seq_len=8192,
            global_batch_size=256,
            recompute="full",
            precision="fp8",
        ).step_time_s
        best = t if best is None else min(best, t)
    from parastrat.planner.search import RANK_TIE

    fastest = min(c.step.step_time_s for c in pinned.candidates)
    assert fastest == pytest.approx(best)
    assert pinned.best.step.step_time_s <= best * (1 + RANK_TIE)


def test_to_dict_shape(result):
    d = result.to_dict()
    assert list(d) == ["candidates", "track_record", "published"]
    assert list(d["candidates"][0]) == [
        "strategy",
        "micro_batch_size",
        "recompute",
        "memory",
        "step",
        "why",
        "alternatives",
    ]


def test_pins_and_bounds():
    r = plan(LLAMA70, H100_64, seq_len=4096, global_batch_size=128, tp=4, max_pp=4)
    assert all(c.strategy.tp == 4 and c.strategy.pp <= 4 for c in r.candidates)


def test_nothing_fits_says_what_would():
    with pytest.raises(UsageError, match="devices would fit"):
        plan(
            ps.models.get("llama3.1-405b"),
            ps.Cluster("h100", num_devices=8),
            seq_len=8192,
            global_batch_size=64,
        )


def test_the_device_count_it_names_fits_with_headroom():
    """Llama 3 70B on 8 H100 does not fit; the message names 16 devices and a strategy for
    them that leaves headroom (the fastest at 16, TP8 PP2, would sit at 79.5 of 79.6 GiB), and
    that strategy, planned as named, fits below 95 % of device memory."""
    import re

    from parastrat.planner.explain import TIGHT_MEMORY

    with pytest.raises(UsageError) as err:
        plan(LLAMA70, ps.Cluster("h100", num_devices=8), seq_len=4096, global_batch_size=256)
    msg = str(err.value)
    found = re.search(
        r"(\d+) devices would fit, e\.g\. (.+?) mbs(\d+) (\w+) \(peak ([\d.]+) GiB\)", msg
    )
    assert found, msg
    n, strategy, mbs, mode, gib = found.groups()
    cluster = ps.Cluster("h100", num_devices=int(n))
    mem = ps.estimate_memory(
        LLAMA70,
        ps.Strategy.parse(strategy).with_world_size(int(n)),
        seq_len=4096,
        global_batch_size=256,
        micro_batch_size=int(mbs),
        recompute=mode,
    )
    assert mem.peak_bytes / 2**30 == pytest.approx(float(gib), abs=0.05)
    assert mem.peak_bytes <= TIGHT_MEMORY * cluster.memory_bytes


def test_impossible_count_is_usage_error():
    # 97 is prime: no TP (64 heads), PP (80 layers), CP (4096 / 2c) or DP split of it works
    # (7 devices would: PP 7 with an uneven 10 + 5 x 12 + 10 layer split)
    with pytest.raises(UsageError, match="no legal strategy"):
        plan(LLAMA70, ps.Cluster("h100", num_devices=97), seq_len=4096, global_batch_size=8)


def test_smallest_mode():
    r = plan(
        ps.models.get("llama3-8b"),
        ps.Cluster("h100", num_devices=64),
        seq_len=4096,
        global_batch_size=64,
        num_devices="smallest",
    )
    assert r.num_devices < 64 and r.candidates


def test_explain_shows_seed_and_departure(result):
    text = result.explain()
    assert "seed guide's starting point" in text and "TP8" in text


def test_unpriced_seed_says_which_rule_or_how_much_memory():
    """When the seed guide's strategy has no price, the explanation names the rule it breaks
    (with its fix) or its smallest peak against the device, not a generic "or"."""
    seven = ps.plan(
        "llama3-8b", ps.Cluster("h100", num_devices=8), seq_len=4096, global_batch_size=7
    )
    assert "it breaks batch-divisible" in seven.explain() and "fix: use" in seven.explain()
    chunks = ps.plan(
        "llama4-scout", ps.Cluster("h100", num_devices=64), seq_len=32768, global_batch_size=256
    )
    text = chunks.explain()
    assert "it breaks cp-attention-chunk" in text and "use cp in {2}" in text
    from parastrat.planner.explain import _seed_failure

    seventy = ps.plan(
        "llama3-70b", ps.Cluster("h100", num_devices=64), seq_len=4096, global_batch_size=64
    )
    whole = ps.Strategy().with_world_size(64)  # legal, but 70B unsplit exceeds 80 GiB
    why = _seed_failure(seventy, whole)
    assert why.startswith("it does not fit in memory") and "of 79.6 GiB" in why  # usable


def test_heuristic_tables():
    # the skill's worked rows: DeepSeek-V3 TP2 PP16 EP64; dense 70B -> TP 8 + PP 4
    h = seed_strategy(ps.models.get("deepseek-v3"), 1024, 4096)
    assert (h.strategy.tp, h.strategy.ep) == (2, 64)
    h = seed_strategy(LLAMA70, 64, 4096)
    assert (h.strategy.tp, h.strategy.pp) == (8, 4)


def test_pipeline_variants_make_real_strategies():
    from parastrat.planner.search import pipeline_variants

    ds = ps.models.get("deepseek-v3")
    # 61 layers on PP 8: middle stages ceil(61/8) = 8, the ends share 61 - 6*8 = 13 -> 7 + 6
    kw, *layouts = pipeline_variants(ds, 8, 1)
    assert kw == {"first_stage_layers": 7, "last_stage_layers": 6}
    assert ps.Strategy(pp=8, **kw).stage_layers(61) == [7] + [8] * 6 + [6]
    # beside it, the layouts recipe authors write (embedding and MTP/loss given a slot)
    assert layouts and all(set(k) == {"pipeline_layout"} for k in layouts)
    # with VPP the accounted split is refused (61 + 2 slots do not divide into 32 chunks):
    # the variants are layouts, Bridge's own "Et|(tt|)*30mL" among them
    vpp4 = pipeline_variants(ds, 8, 4)
    assert {"pipeline_layout": "Et|(t*2|)*30mL"} in vpp4
    assert all(set(k) == {"pipeline_layout"} for k in vpp4)
    # every variant passes the rules validate() applies
    for pp, vpp in ((8, 1), (8, 2), (8, 4), (16, 1), (4, 4)):
        for kw in pipeline_variants(ds, pp, vpp):
            s = ps.Strategy(tp=2, pp=pp, vpp=vpp, ep=8, sp=True, **kw)
            assert not [v for v in s.check(ds) if v.severity == "error"], (pp, vpp, kw)
    # Llama 3.1 405B: 126 + 2 = 128 = 8 stages x 8 chunks x 2 -> Megatron's own rule holds
    big = ps.models.get("llama3.1-405b")
    kw = pipeline_variants(big, 8, 8)[0]
    assert kw == {"account_for_embedding": True, "account_for_loss": True}
    s = ps.Strategy(tp=8, pp=8, vpp=8, **kw)
    assert not [v for v in s.check(big) if v.severity == "error"]
    # an even split needs nothing
    assert pipeline_variants(LLAMA70, 8, 5) == ({},)


def test_vpp_variants_do_not_crowd_the_ranking(result):
    from parastrat.planner.search import VPP_TIE

    keys = [c.layout for c in result.candidates]
    assert len(keys) == len(set(keys))  # one candidate per layout
    for c in result.candidates:
        top = min([c, *c.alternatives], key=lambda x: x.step.step_time_s)
        fastest = top.step.step_time_s
        for a in c.alternatives:
            assert a.layout == c.layout
            assert (a.strategy.vpp, a.strategy.ulysses) != (c.strategy.vpp, c.strategy.ulysses)
            # near-equal: within VPP_TIE of the layout's fastest variant; the one shown is
            # the plainest of those needing no more memory than the fastest: no CPU
            # offloading, no custom pipeline layout, the fewest virtual stages, the fastest
            assert a.step.step_time_s <= fastest * (1 + VPP_TIE)
            assert c.memory.peak_bytes <= top.memory.peak_bytes
            if a.memory.peak_bytes > top.memory.peak_bytes:
                continue
            plain = (bool(c.cpu_offload_layers), c.strategy.pipeline_layout is not None)
            other = (bool(a.cpu_offload_layers), a.strategy.pipeline_layout is not None)
            assert (*plain, c.strategy.vpp or 1, c.step.step_time_s) <= (
                *other,
                a.strategy.vpp or 1,
                a.step.step_time_s,
            )
        assert c.step.step_time_s <= fastest * (1 + VPP_TIE)
    with_alts = [c for c in result.candidates if c.alternatives]
    if with_alts:
        c = with_alts[0]
        assert "near-equal" in c.why
        # find() counts a published VPP that the plan collapsed into an alternative
        alt = next((a for a in c.alternatives if a.strategy.vpp != c.strategy.vpp), None)
        if alt is not None:
            assert result.find(alt.strategy) == result.candidates.index(c)


def _fake(step_s, exposed_s, peak, tp=1, pp=1, cp=1, ep=1, etp=1, offload=0):
    """A Candidate stand-in with only what tie_ordered reads."""
    from types import SimpleNamespace

    return SimpleNamespace(
        step=SimpleNamespace(step_time_s=step_s, exposed_comm_s=exposed_s),
        memory=SimpleNamespace(peak_bytes=peak),
        strategy=SimpleNamespace(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp),
        cpu_offload_layers=offload,
    )


def test_tie_ordering_rule():
    from parastrat.planner.search import tie_ordered

    # exposure classes are steps of 2 % of the step time:
    # a: fastest, 30 % exposed (class 15); b: 1 % slower, 5 % exposed (class 2) -> tie, b first;
    # c: 1.5 % slower than a, 5 % exposed (class 2) but more memory -> after b;
    # d: 5 % slower -> last whatever its exposure
    a, b, c, d = (
        _fake(1.00, 0.30, 10),
        _fake(1.01, 0.0505, 10),
        _fake(1.015, 0.05075, 20),
        _fake(1.05, 0.0, 1),
    )
    assert tie_ordered([a, b, c, d]) == [b, c, a, d]
    # exposures of 1.1 % and 1.3 % of the step are one class (0): memory decides
    f, g = _fake(1.00, 0.013, 185), _fake(1.017, 0.0112, 140)
    assert tie_ordered([f, g]) == [g, f]
    # 1.00 vs 1.03: not a tie, the faster stays first whatever its exposure
    e = _fake(1.03, 0.0, 1)
    assert tie_ordered([a, e]) == [a, e]
    # within the tie, less model parallelism first (TP x CP x PP 8 vs 16), whatever the
    # exposure and memory; then EP x ETP (8 vs 16) at equal TP x CP x PP
    h = _fake(1.00, 0.0, 10, tp=4, pp=4)
    k = _fake(1.015, 0.20, 50, tp=2, pp=4)
    assert tie_ordered([h, k]) == [k, h]
    m, n = _fake(1.00, 0.0, 10, ep=16), _fake(1.01, 0.10, 60, ep=8)
    assert tie_ordered([m, n]) == [n, m]
    # before all of these: a candidate that offloads no activations to the CPU, even with
    # more model parallelism; a faster-by-more-than-the-tie offloading one still goes first
    off, no = _fake(1.00, 0.0, 10, tp=8, offload=47), _fake(1.018, 0.05, 60, tp=4, pp=4)
    assert tie_ordered([off, no]) == [no, off]
    assert tie_ordered([off, _fake(1.03, 0.0, 1)])[0] is off


def test_cli_plan_moe_switches(capsys):
    """`parastrat plan --moe-dispatcher flex` prices with DeepEP's once-per-domain dispatch:
    Qwen3-30B-A3B on 16 H100 (two nodes), EP 16 pinned: fewer scale-out bytes, a shorter
    step than the default alltoall dispatcher."""
    import json

    from parastrat.cli import main

    args = [
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--gpus",
        "16",
        "--accelerator",
        "h100",
        "--seq-len",
        "4096",
        "--global-batch-size",
        "256",
        "--precision",
        "fp8",
        "--ep",
        "16",
        "--tp",
        "1",
        "--pp",
        "1",
        "--cp",
        "1",
        "--micro-batch-size",
        "1",
        "--format",
        "json",
        "--top-k",
        "1",
    ]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)["candidates"][0]["step"]
    assert main(args + ["--moe-dispatcher", "hybridep"]) == 0
    flex = json.loads(capsys.readouterr().out)["candidates"][0]["step"]
    assert flex["breakdown"]["ep"] < plain["breakdown"]["ep"]
    assert flex["step_time_s"] < plain["step_time_s"]


def test_why_names_ties(result):
    """A candidate within RANK_TIE of the next says it is a tie and why it ranks first;
    otherwise it says by how much it is faster."""
    from parastrat.planner.search import RANK_TIE, model_parallel_sizes

    for c, nxt in zip(result.ranked, result.ranked[1:]):
        gain = nxt.step.step_time_s / c.step.step_time_s - 1
        assert ("tied with" in c.why) == (abs(gain) < RANK_TIE)
        # the reason given is true of the pair
        if "less model parallelism" in c.why:
            assert model_parallel_sizes(c) < model_parallel_sizes(nxt)
        if "for lower peak memory" in c.why:
            assert c.memory.peak_bytes < nxt.memory.peak_bytes
        if "for shorter step" in c.why:
            assert gain >= 0


def test_top_k_bounds_candidates():
    r = plan(LLAMA70, H100_64, seq_len=8192, global_batch_size=256, precision="fp8", top_k=3)
    assert len(r.candidates) == 3
    assert r.candidates == r.ranked[:3] and len(r.ranked) >= 10
    assert len(r.to_dict()["candidates"]) == 3
    # find() looks through the wider ranking
    tenth = r.ranked[9]
    assert r.find(tenth.strategy) is not None and r.find(tenth.strategy) <= 9


@pytest.mark.parametrize(
    "bad",
    [dict(tp=0), dict(pp=0), dict(ep=0), dict(micro_batch_size=0), dict(tp=[]), dict(max_tp=0)],
)
def test_bad_pins_are_usage_errors_naming_the_argument(bad):
    from parastrat.errors import UsageError

    (name,) = bad
    with pytest.raises(UsageError, match=name):
        plan(LLAMA70, H100_64, seq_len=8192, global_batch_size=256, **bad)
    with pytest.raises(UsageError, match="recompute"):
        plan(LLAMA70, H100_64, seq_len=8192, global_batch_size=256, recompute=[])


def test_max_etp_bounds_expert_tensor_parallelism():
    from parastrat.planner.search import enumerate_strategies

    qwen = ps.models.get("qwen3-30b-a3b")
    kw = dict(scale_up_domain=8)
    free = list(enumerate_strategies(qwen, 16, 4096, 1024, **kw))
    bounded = list(enumerate_strategies(qwen, 16, 4096, 1024, max_etp=1, **kw))
    assert any(s.etp > 1 for s in free)  # EP with TP offers ETP = TP too
    assert bounded and all(s.etp == 1 for s in bounded)
    assert len(bounded) < len(free)


def test_print_plan_is_one_short_line():
    p = ps.plan(
        ps.models.get("llama3-8b"),
        ps.Cluster("h100", num_devices=8),
        seq_len=4096,
        global_batch_size=64,
    )
    text = repr(p)
    assert text.startswith("Plan(llama3-8b on 8 x h100: best ") and len(text) < 300
    assert str(p.best.strategy) in text


def test_dense_models_have_no_expert_tie_size():
    from parastrat.planner.ranking import model_parallel_sizes

    p = ps.plan(
        ps.models.get("llama3-70b"),
        ps.Cluster("h100", num_devices=64),
        seq_len=8192,
        global_batch_size=256,
    )
    assert all(model_parallel_sizes(c)[1] == 1 for c in p.ranked)
    assert "EPxETP" not in "".join(c.why for c in p.ranked)


def test_nothing_legal_hints_are_reachable():
    """The suggested device counts suit the pinned TP x PP, and the batch suggestion is never
    the batch already given."""
    from parastrat.errors import UsageError

    with pytest.raises(UsageError) as err:
        ps.plan(
            ps.models.get("llama3-70b"),
            ps.Cluster("h100", num_devices=60),
            seq_len=8192,
            global_batch_size=256,
            tp=8,
            pp=4,
        )
    msg = str(err.value)
    assert "e.g. 256)" not in msg
    import re

    tried = re.search(r"try ([\d, ]+) devices", msg)
    assert tried, msg
    assert all(int(w) % 32 == 0 for w in tried.group(1).split(", "))


def test_a_cluster_name_is_refused_with_the_cluster_to_build():
    wl = ps.Workload(model="llama3-8b", seq_len=4096, global_batch_size=64)
    with pytest.raises(UsageError, match=r"Cluster\('h100', num_devices=64\)"):
        ps.plan(wl, "h100")


def test_interleaved_candidates_have_a_multiple_of_pp_micro_batches():
    """Megatron Core's interleaved schedule refuses a last group of fewer than pp
    micro-batches: every interleaved candidate passes that rule (Qwen3-32B on 32 H100 at
    global batch 56 chose PP2 VP11 with 7 micro-batches)."""
    plan = ps.plan(
        ps.models.get("qwen3-32b"), ps.Cluster("h100", 32), seq_len=4096, global_batch_size=56
    )
    for c in plan.ranked:
        s = c.strategy
        if s.vpp > 1:
            assert (56 // (s.dp * c.micro_batch_size)) % s.pp == 0, c.label()


def test_the_plan_shows_the_plainest_near_equal_schedule_with_as_much_headroom():
    """Llama 3 70B on 64 H100 (BF16, 4K, global batch 256), layout TP4 PP2 CP2: VP7 with a
    custom layer split is priced a hair ahead of Megatron's even VP4 split, which needs less
    memory: the plan shows VP4 and lists VP7.  Mixtral 8x7B on 8 GB200: PP2 VP16 (one layer
    per chunk) stays, because the shallower VP4 would need 6 GiB more of 186 (the interleaved
    warm-up holds more layers' activations with fewer virtual stages)."""
    p = plan("llama3-70b", H100_64, seq_len=4096, global_batch_size=256)
    tp4 = [c for c in p.ranked if (c.strategy.tp, c.strategy.pp, c.strategy.cp) == (4, 2, 2)]
    shown = tp4[0]
    assert shown.strategy.vpp == 4 and shown.strategy.pipeline_layout is None
    fastest = min(shown.alternatives, key=lambda a: a.step.step_time_s)
    assert fastest.step.step_time_s < shown.step.step_time_s
    assert fastest.strategy.pipeline_layout is not None
    assert fastest.memory.peak_bytes >= shown.memory.peak_bytes

    mix = plan(
        "mixtral-8x7b", ps.Cluster("gb200", num_devices=8), seq_len=4096, global_batch_size=256
    )
    best = mix.best
    assert (best.strategy.pp, best.strategy.vpp) == (2, 16)
    shallower = [a for a in best.alternatives if a.strategy.vpp == 4]
    assert shallower and shallower[0].memory.peak_bytes > best.memory.peak_bytes


def test_a_candidate_near_the_memory_limit_says_so_and_headroom_removes_it():
    """Mixtral 8x7B on 8 GB200: the best fits at 96.5 % of device memory; its reason says the
    headroom is small and names the flag, and headroom=0.05 plans below 95 %."""
    from parastrat.planner.explain import TIGHT_MEMORY

    cluster = ps.Cluster("gb200", num_devices=8)
    kw = dict(seq_len=4096, global_batch_size=256)
    p = plan("mixtral-8x7b", cluster, **kw)
    cap = cluster.memory_bytes
    for c in p.candidates:
        tight = c.memory.peak_bytes > TIGHT_MEMORY * cap
        assert ("little headroom" in c.why) == tight
    assert "little headroom" in p.best.why and "--headroom 0.05" in p.best.why
    roomy = plan("mixtral-8x7b", cluster, headroom=0.05, **kw)
    assert all(c.memory.peak_bytes <= 0.95 * cap for c in roomy.candidates)
    assert not any("little headroom" in c.why for c in roomy.candidates)


def test_the_tie_reason_is_the_first_criterion_that_differs():
    """One source for why a tied candidate is ahead (the reason under the table and the
    table's "over next" column): the first tie_key criterion that differs, when the
    candidate is ahead on it; none when it is behind there."""
    from parastrat.cli.plan import ranking_reason
    from parastrat.planner.ranking import tie_criterion

    no_off, off = _fake(1.01, 0.0, 10, tp=4, pp=4), _fake(1.00, 0.0, 5, tp=8, offload=47)
    assert tie_criterion(no_off, off) == "offload"
    assert ranking_reason(no_off, off) == "tie: no offload"
    small, big = _fake(1.01, 0.2, 50, tp=2), _fake(1.00, 0.0, 5, tp=8)
    assert tie_criterion(small, big) == "model"
    assert ranking_reason(small, big) == "tie: TPxCPxPP 2 < 8"
    assert tie_criterion(big, small) is None  # behind on the first criterion that differs
    assert ranking_reason(big, small) == "tie: set by those ahead"
    lean, fat = _fake(1.0, 0.0, 5), _fake(1.0, 0.0, 9)
    assert tie_criterion(lean, fat) == "memory"
    assert ranking_reason(_fake(1.0, 0.0, 5), _fake(1.05, 0.0, 5)) == "faster by 5.0%"


def test_a_reason_names_the_five_nearest_variants_and_counts_the_rest():
    """Llama 3 70B on 64 H100 (the README's job): TP4 PP2 CP2 has 20 near-equal variants; its
    reason names the 5 nearest in step time and says how many more (the JSON keeps all)."""
    from parastrat.planner.explain import VARIANTS_NAMED

    p = plan(LLAMA70, H100_64, seq_len=8192, global_batch_size=256)
    many = [c for c in p.candidates if len(c.alternatives) > VARIANTS_NAMED]
    assert many
    for c in many:
        part = next(x for x in c.why.split("; ") if x.startswith("near-equal variants"))
        assert part.count("%,") == VARIANTS_NAMED - 1
        assert part.endswith(f" and {len(c.alternatives) - VARIANTS_NAMED} more")
        assert "-0.00%" not in part
        assert len(c.to_dict()["alternatives"]) == len(c.alternatives)
