"""Running a strategy: process groups on nccl / hccl / gloo, local launches, and verification.

- :func:`initialize` / :func:`destroy` (``groups.py``): a strategy's process groups, through
  Megatron Core for training and laid out for xDiT / MindIE-SD / yunchang for inference.
- :mod:`backend`: launcher environment (torchrun, Slurm) and device -> backend choice.
- :func:`spawn_local` (``launch.py``): N local ranks as torchrun would start them, never hanging.
- :func:`verify` / :func:`verify_local` (``verify.py``): numeric checks of every group.

Importing this package does not import torch; each function imports what it needs.
"""

from .groups import Groups, current, destroy, initialize
from .launch import RankFailure, spawn_local
from .verify import VerifyReport, verify, verify_local

__all__ = [
    "Groups",
    "RankFailure",
    "VerifyReport",
    "current",
    "destroy",
    "initialize",
    "spawn_local",
    "verify",
    "verify_local",
]
