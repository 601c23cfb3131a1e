"""parastrat.adapters.diffusers against the installed diffusers (0.42.1 checked; with an older
diffusers the tests that build its config objects are skipped, saying why)."""

from __future__ import annotations

import sys

import pytest

diffusers = pytest.importorskip("diffusers")
torch = pytest.importorskip("torch")

import parastrat
from parastrat import ModelSpec, Strategy, StrategyError
from parastrat.adapters import diffusers as dd
from parastrat.errors import MissingExtraError

#: diffusers' parallel configs arrived in 0.36 (ContextParallelConfig) and 0.40
#: (TensorParallelConfig).  The test extra pins diffusers < 0.40: 0.40 and later need
#: huggingface-hub >= 1.23, which Megatron Bridge's transformers < 5 cannot import with.
needs_cp = pytest.mark.skipif(
    not hasattr(diffusers, "ContextParallelConfig"),
    reason=f"diffusers {diffusers.__version__} has no ContextParallelConfig (needs >= 0.36)",
)
needs_tp = pytest.mark.skipif(
    not hasattr(diffusers, "TensorParallelConfig"),
    reason=f"diffusers {diffusers.__version__} has no TensorParallelConfig (needs >= 0.40; the "
    "test extra keeps < 0.40 for Megatron Bridge's huggingface-hub < 1)",
)

#: Flux-like DiT: 24 attention heads.
FLUX = ModelSpec(
    name="flux-like",
    num_layers=57,
    hidden_size=3072,
    num_attention_heads=24,
    ffn_hidden_size=12288,
    vocab_size=1,
)


@needs_cp
@pytest.mark.parametrize(
    "s, ulysses, ring",
    [
        (Strategy(ulysses=4), 4, 1),
        (Strategy(ring=4), 1, 4),  # ring only (Megatron-style order, same placement)
        (Strategy(ulysses=2, ring=4), 2, 4),
    ],
)
def test_context_parallel_config_degrees(s, ulysses, ring):
    cp = dd.to_context_parallel_config(s)
    assert isinstance(cp, diffusers.ContextParallelConfig)
    assert (cp.ulysses_degree, cp.ring_degree) == (ulysses, ring)


@needs_cp
def test_mesh_places_ulysses_innermost_like_the_layout():
    """diffusers builds ``init_device_mesh(mesh_shape=(ring, ulysses))``: ranks fill the mesh
    row-major, so a Ulysses group is a row of consecutive ranks and a ring group a column.
    parastrat's layout must give the same groups for the same strategy."""
    s = Strategy(ulysses=2, ring=4)
    cp = dd.to_context_parallel_config(s)
    assert cp.mesh_dim_names == ("ring", "ulysses")
    grid = torch.arange(s.cp).view(cp.mesh_shape)  # what init_device_mesh lays out
    groups = parastrat.layout(s, s.cp)
    assert sorted(groups["ulysses"]) == sorted(grid.tolist())
    assert sorted(groups["ring"]) == sorted(grid.t().tolist())


@needs_cp
def test_options_pass_through():
    cp = dd.to_context_parallel_config(Strategy(ring=2), convert_to_fp32=False)
    assert cp.convert_to_fp32 is False


@needs_cp
def test_heads_checked_with_the_model():
    # 24 heads: 24 % 8 = 0 fits; 24 % 16 = 8 is refused ...
    assert dd.to_context_parallel_config(Strategy(ulysses=8), FLUX).ulysses_degree == 8
    with pytest.raises(StrategyError) as err:
        dd.to_context_parallel_config(Strategy(ulysses=16), FLUX)
    assert err.value.rules == ["heads-ulysses"]
    # ... unless diffusers' "Ulysses anything" mode handles any head count.
    cp = dd.to_context_parallel_config(Strategy(ulysses=16), FLUX, ulysses_anything=True)
    assert cp.ulysses_anything is True


def test_refusals_listed_together():
    s = Strategy(tp=2, ulysses=2, cfg=2, pp=2)
    with pytest.raises(StrategyError) as err:
        dd.to_context_parallel_config(s)
    assert set(err.value.rules) == {"diffusers-pp", "diffusers-cfg", "diffusers-cp-tp"}


@pytest.mark.parametrize(
    "s, kwargs, rule",
    [
        (Strategy(), {}, "diffusers-cp-none"),
        (Strategy(ep=2, ring=2), {}, "diffusers-ep"),
        # mesh over all ranks: world 8 for ulysses*ring = 4 would leave dp 2
        (Strategy(ulysses=4), {"world_size": 8}, "diffusers-world"),
        (Strategy(ulysses=4).with_world_size(8), {}, "diffusers-world"),
    ],
)
def test_what_diffusers_cannot_express(s, kwargs, rule):
    with pytest.raises(StrategyError) as err:
        dd.to_context_parallel_config(s, **kwargs)
    assert err.value.rules == [rule]


@needs_tp
def test_parallel_config_tp_or_cp():
    tp = dd.to_parallel_config(Strategy(tp=4))
    assert isinstance(tp, diffusers.ParallelConfig)
    assert tp.context_parallel_config is None and tp.tensor_parallel_config.tp_degree == 4
    cp = dd.to_parallel_config(Strategy(ulysses=2))
    assert cp.tensor_parallel_config is None and cp.context_parallel_config.ulysses_degree == 2
    with pytest.raises(StrategyError) as err:
        dd.to_parallel_config(Strategy(tp=5), FLUX)  # 24 % 5 = 4
    assert err.value.rules == ["heads-tp"]


def test_missing_diffusers_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "diffusers", None)  # makes `import diffusers` fail
    with pytest.raises(MissingExtraError) as err:
        dd.to_context_parallel_config(Strategy(ulysses=2))
    assert err.value.extra == "diffusers"
    assert 'pip install "parastrat[diffusers]"' in str(err.value)


def test_a_diffusers_too_old_for_tp_says_upgrade_not_install():
    """diffusers before 0.40 has no TensorParallelConfig: the error says the installed one is
    too old and how to upgrade (it said "not installed" and named the extra, which an
    installed 0.39 already satisfies)."""
    if hasattr(diffusers, "TensorParallelConfig"):
        pytest.skip("this diffusers has TensorParallelConfig")
    with pytest.raises(MissingExtraError, match=r"too old.*pip install -U \"diffusers>=0.40\""):
        dd.to_parallel_config(Strategy(tp=2))


def test_an_option_diffusers_refuses_is_a_strategy_error():
    if not hasattr(diffusers, "ContextParallelConfig"):
        pytest.skip("this diffusers has no ContextParallelConfig")
    with pytest.raises(StrategyError, match="diffusers-cp-option"):
        dd.to_context_parallel_config(Strategy(ulysses=2, ring=2), ulysses_anything=True)
    with pytest.raises(StrategyError, match="diffusers-cp-option"):
        dd.to_context_parallel_config(Strategy(ulysses=2), bogus=1)
