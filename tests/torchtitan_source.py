"""Fixtures for checks against the real torch.distributed fake backend and torchtitan's source.

torchtitan 0.3.0 is installed ``--no-deps``; its package imports modules a machine may lack
(``tyro`` through ``torchtitan.config.__init__`` and ``spmd_types``, used only for annotations
and for other SPMD backends; the test extra installs both), so :func:`parallel_dims` imports
``distributed/parallel_dims.py`` and ``config/configs.py`` themselves, with a bare
``torchtitan.config`` package (and an empty ``spmd_types`` where it is missing), and removes
them again afterwards.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types

import pytest


@pytest.fixture
def fake_world():
    """``start(world)`` initializes torch.distributed on the fake backend; torn down after."""
    dist = pytest.importorskip("torch.distributed")
    fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")
    if dist.is_initialized():
        pytest.skip("torch.distributed already initialized in this process")

    def start(world: int) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        dist.init_process_group("fake", store=fake_pg.FakeStore(), rank=0, world_size=world)

    yield start
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture
def parallel_dims(monkeypatch):
    """torchtitan's ``ParallelDims`` class (its ``ParallelismConfig`` is ``.config_class``)."""
    tt = pytest.importorskip("torchtitan")
    pytest.importorskip("torch")
    root = os.path.dirname(tt.__file__)
    before = set(sys.modules)
    package = types.ModuleType("torchtitan.config")
    package.__path__ = [os.path.join(root, "config")]  # skip its __init__ (needs tyro)
    monkeypatch.setitem(sys.modules, "torchtitan.config", package)
    if importlib.util.find_spec("spmd_types") is None:
        monkeypatch.setitem(sys.modules, "spmd_types", types.ModuleType("spmd_types"))
    from torchtitan.config.configs import ParallelismConfig
    from torchtitan.distributed.parallel_dims import ParallelDims

    ParallelDims.config_class = ParallelismConfig
    yield ParallelDims
    for name in set(sys.modules) - before:
        if name.startswith("torchtitan"):
            del sys.modules[name]
