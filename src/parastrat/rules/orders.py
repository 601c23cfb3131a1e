"""The rank orders the rules and the Strategy know, written once: the axis names of a training
and of an inference order, and the orders the frameworks use (the first name varies fastest)."""

from __future__ import annotations

#: The axes a training order permutes (Megatron Core's ``RankGenerator``).
TRAINING_ORDER_NAMES = ("tp", "cp", "ep", "dp", "pp")
#: The axes an inference order permutes (xDiT; sp = ulysses * ring).
INFERENCE_ORDER_NAMES = ("tp", "sp", "pp", "cfg", "dp")
#: Megatron Core's default rank order.
MEGATRON_ORDER = "tp-cp-ep-dp-pp"
#: Megatron Bridge's ``use_tp_pp_dp_mapping`` order.
MEGATRON_TP_PP_DP_ORDER = "tp-cp-ep-pp-dp"
#: xDiT's order for diffusion inference.
XDIT_ORDER = "tp-sp-pp-cfg-dp"
