"""apply() is all or nothing even when the write loop is interrupted (KeyboardInterrupt), a
rollback write raises, or a shape field is mistyped (a real Megatron Core TransformerConfig)."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("megatron.core")
from megatron.core.transformer.transformer_config import TransformerConfig

from parastrat import Strategy, StrategyError
from parastrat.adapters import megatron as mg

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]


class Flaky(TransformerConfig):
    """A TransformerConfig whose n-th attribute write after arming raises ``error``; with
    ``refuse_restore`` the writes restoring the old values raise too (setattr only)."""

    def __setattr__(self, name, value):
        armed = self.__dict__.get("_armed")
        if armed is not None:
            armed["count"] += 1
            if armed["count"] == armed["at"] or (
                armed.get("refuse_restore") and armed["count"] > armed["at"]
            ):
                raise armed["error"]
        super().__setattr__(name, value)


def flaky(at: int, error: BaseException, refuse_restore: bool = False) -> Flaky:
    cfg = Flaky(num_layers=16, hidden_size=512, num_attention_heads=16, num_query_groups=4)
    cfg.__dict__["_armed"] = {
        "count": 0,
        "at": at,
        "error": error,
        "refuse_restore": refuse_restore,
    }
    return cfg


def fields_of(cfg) -> dict:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


@pytest.mark.parametrize("at", [2, 3])
@pytest.mark.parametrize("error", [KeyboardInterrupt(), RuntimeError("setter failed")])
def test_interrupted_apply_leaves_the_config_as_it_was(at, error):
    cfg = flaky(at, error)
    before = fields_of(cfg)
    with pytest.raises(type(error)):
        mg.apply(cfg, Strategy(tp=2, pp=2, sp=True), framework_check=False)
    cfg.__dict__["_armed"] = None
    assert fields_of(cfg) == before


def test_a_rollback_write_that_raises_does_not_stop_the_others():
    cfg = flaky(3, RuntimeError("setter failed"), refuse_restore=True)
    before = fields_of(cfg)
    with pytest.raises(RuntimeError):
        mg.apply(cfg, Strategy(tp=2, pp=2, sp=True), framework_check=False)
    cfg.__dict__["_armed"] = None
    assert fields_of(cfg) == before


def test_mistyped_heads_are_refused_not_skipped():
    cfg = TransformerConfig(num_layers=16, hidden_size=512, num_attention_heads=16)
    cfg.num_attention_heads = "32"
    before = fields_of(cfg)
    with pytest.raises(StrategyError) as err:
        mg.apply(cfg, Strategy(tp=3), framework_check=False)
    assert "megatron-config-field" in err.value.rules
    assert "'32'" in str(err.value)
    assert fields_of(cfg) == before
