"""Megatron Bridge override lines for the field table's writes, placed where a recipe holds
each section (``run_recipe.py`` parses them with Hydra's grammar onto the recipe's container).

Two sections of a Bridge 0.3.1 recipe differ in shape from recipe to recipe, and Bridge's
override parser refuses a line written for the other shape:

* ``comm_overlap`` is ``None`` in some recipes (``llama3_8b_pretrain_config``,
  ``qwen3_*``, ``gpt_oss_*``): ``comm_overlap.tp_comm_overlap=...`` is refused there ("Could
  not override"), and the model's own field is the one that counts (nothing copies over it);
  where the section exists, its ``setup()`` copies its value over the model's, so the line
  must go to the section.
* ``mixed_precision`` is a recipe *name* in most recipes (``"bf16_mixed"``, resolved at
  start-up) and a ``MixedPrecisionConfig`` in others: ``mixed_precision.fp8=...`` is refused
  on a name.  One line, ``++mixed_precision={_target_: ...MixedPrecisionConfig, ...}``,
  replaces either shape with the named recipe's values plus the plan's writes; Bridge's
  parser instantiates the ``_target_`` (dtypes as ``{_target_: torch.bfloat16, _call_:
  false}``).  On a config object the per-field lines are kept (they leave its other fields).

The shape comes from the container itself when one is given, else from :data:`RECIPE_SHAPES`
(the Bridge 0.3.1 recipes that differ from the shape every recipe starts from,
:data:`BASE_SHAPE`; checked against the real recipes in ``tests/test_bridge_overrides.py``).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import Any

from ..errors import UsageError

#: Where Bridge's override parser finds the mixed-precision class it instantiates.
MIXED_PRECISION_TARGET = "megatron.bridge.training.mixed_precision.MixedPrecisionConfig"
#: ``MixedPrecisionConfig`` fields that hold a torch dtype.
DTYPE_FIELDS = ("params_dtype", "pipeline_dtype", "autocast_dtype")

_BF16 = "bfloat16"
#: The fields Bridge's named mixed-precision recipes set (``megatron/bridge/training/
#: mixed_precision.py``), for the names Bridge 0.3.1's recipes of parastrat's presets use:
#: ``bf16_mixed()`` (every recipe's default, via ``_pretrain_common``),
#: ``nemotron_h_bf16_with_fp8_current_scaling_mixed()`` (the Nemotron-H 47B / 56B recipes) and
#: ``nanov2_bf16_with_fp8_current_scaling_mixed()`` (Nemotron Nano 12B v2).
#: Dtypes by torch attribute name.
NAMED_PRECISIONS: dict[str, dict[str, Any]] = {
    "bf16_mixed": {
        "bf16": True,
        "params_dtype": _BF16,
        "pipeline_dtype": _BF16,
        "autocast_enabled": False,
        "grad_reduce_in_fp32": True,
    },
}
NAMED_PRECISIONS["nanov2_bf16_with_fp8_current_scaling_mixed"] = {
    **NAMED_PRECISIONS["bf16_mixed"],
    "fp8": "hybrid",
    "fp8_recipe": "blockwise",
    "first_last_layers_bf16": True,
    "num_layers_at_start_in_bf16": 2,
    "num_layers_at_end_in_bf16": 2,
    "fp8_param_gather": True,
}
NAMED_PRECISIONS["nemotron_h_bf16_with_fp8_current_scaling_mixed"] = {
    **NAMED_PRECISIONS["bf16_mixed"],
    "fp8": "hybrid",
    "fp8_recipe": "tensorwise",
    "first_last_layers_bf16": True,
    "num_layers_at_start_in_bf16": 2,
    "num_layers_at_end_in_bf16": 2,
    "fp8_param_gather": True,
}


@dataclass(frozen=True)
class RecipeShape:
    """How a recipe's container holds the two sections whose shape varies: whether it has a
    ``comm_overlap`` section, and its ``mixed_precision`` as a recipe name (None: a config
    object, written field by field).  ``named_fields``: the named recipe's values, when
    known from the container itself (else :data:`NAMED_PRECISIONS`)."""

    comm_overlap: bool
    mixed_precision: str | None
    named_fields: tuple[tuple[str, Any], ...] | None = None
    #: False for a container whose ``mixed_precision`` is None: its fields go to the model,
    #: as ``apply`` writes them, and the section's own fields are left out
    has_mixed_precision: bool = True
    #: the dataset config's sequence-length key: ``sequence_length`` for a pretraining
    #: recipe's ``GPTDatasetConfig`` (Megatron Core's field; ``seq_length`` is only a Python
    #: property there, which Hydra cannot override), ``seq_length`` for a fine-tuning
    #: ``FinetuningDatasetConfig``, None when the dataset has neither (left out)
    dataset_seq: str | None = "sequence_length"

    def absent(self) -> frozenset[str]:
        """The sections this recipe's container does not have."""
        return frozenset(
            name
            for name, there in (
                ("comm_overlap", self.comm_overlap),
                ("mixed_precision", self.has_mixed_precision),
            )
            if not there
        )

    def precision_base(self) -> dict[str, Any]:
        """The values the named mixed-precision recipe sets, which the plan's writes update."""
        if self.named_fields is not None:
            return dict(self.named_fields)
        name = self.mixed_precision or ""
        if name.replace("-", "_") not in NAMED_PRECISIONS:
            raise UsageError(
                f"the recipe's mixed_precision={name!r} is a recipe name parastrat does not "
                f"know ({', '.join(sorted(NAMED_PRECISIONS))}); pass the recipe's container "
                "(to_overrides(plan, recipe=cfg)) so its values are read from Bridge"
            )
        return dict(NAMED_PRECISIONS[name.replace("-", "_")])


#: The shape every Bridge 0.3.1 recipe starts from: ``_pretrain_common`` / ``_sft_common`` /
#: ``_peft_common`` (``megatron/bridge/recipes/common.py``) set ``comm_overlap=None`` and
#: ``mixed_precision="bf16_mixed"``; 71 of the 125 recipes this machine can build keep both.
#: A recipe name not in :data:`RECIPE_SHAPES` is taken to have it: its lines are then never
#: refused (``++mixed_precision`` replaces a config object too, and the model's
#: ``tp_comm_overlap`` exists everywhere), though a recipe that does set a ``comm_overlap``
#: section would have its own TP-overlap choice copied over the written one at start-up.
BASE_SHAPE = RecipeShape(comm_overlap=False, mixed_precision="bf16_mixed")
_OBJECT_CO = RecipeShape(comm_overlap=True, mixed_precision=None)
_NAMED_CO = RecipeShape(comm_overlap=True, mixed_precision="bf16_mixed")
_NEMOTRON_FP8 = RecipeShape(
    comm_overlap=True, mixed_precision="nemotron_h_bf16_with_fp8_current_scaling_mixed"
)
_NANO_V2_FP8 = RecipeShape(
    comm_overlap=False, mixed_precision="nanov2_bf16_with_fp8_current_scaling_mixed"
)
#: Bridge 0.3.1's recipes (by the name ``run_recipe.py --recipe`` takes) whose container, as
#: the recipe function returns it, differs from :data:`BASE_SHAPE` in a way the lines must
#: follow: a ``comm_overlap`` section, or another named precision.  (Recipes whose
#: ``mixed_precision`` is a ``MixedPrecisionConfig`` equal to ``bf16_mixed()`` but lack
#: ``comm_overlap`` -- the Qwen2 / Qwen2.5 / Qwen3-MoE SFT and PEFT recipes -- take the base
#: shape's one ``++mixed_precision`` line, which yields the same config.)  Recipes this
#: machine cannot build offline (Gemma, GLM, Ministral, ...) are not recorded.
RECIPE_SHAPES: dict[str, RecipeShape] = {
    **dict.fromkeys(
        (
            "llama3_70b_pretrain_config",
            "llama3_70b_16k_pretrain_config",
            "llama3_70b_64k_pretrain_config",
            "llama31_70b_pretrain_config",
            "llama31_405b_pretrain_config",
            "llama31_405b_sft_config",
            "llama31_405b_peft_config",
            "deepseek_v3_pretrain_config",
            "moonlight_16b_pretrain_config",
            "moonlight_16b_sft_config",
            "moonlight_16b_peft_config",
            "olmoe_7b_pretrain_config",
            "olmoe_7b_sft_config",
            "olmoe_7b_peft_config",
        ),
        _OBJECT_CO,
    ),
    **dict.fromkeys(
        (
            "llama2_7b_pretrain_config",
            "deepseek_v2_pretrain_config",
            "deepseek_v2_lite_pretrain_config",
            "nemotronh_4b_pretrain_config",
            "nemotronh_8b_pretrain_config",
            "nemotron_nano_9b_v2_pretrain_config",
            "nemotron_3_nano_pretrain_config",
        ),
        _NAMED_CO,
    ),
    # pretraining on a conversation dataset (HFDatasetConversationProvider: seq_length)
    **dict.fromkeys(
        (
            "qwen3_vl_8b_pretrain_config",
            "qwen3_vl_30b_a3b_pretrain_config",
            "qwen3_vl_235b_a22b_pretrain_config",
        ),
        RecipeShape(comm_overlap=False, mixed_precision=None, dataset_seq="seq_length"),
    ),
    "nemotronh_47b_pretrain_config": _NEMOTRON_FP8,
    "nemotronh_56b_pretrain_config": _NEMOTRON_FP8,
    "nemotron_nano_12b_v2_pretrain_config": _NANO_V2_FP8,
}
#: What ``to_overrides`` without a recipe assumes: both sections as config objects (a
#: container built in Python, as ``apply`` sees it).
UNKNOWN_SHAPE = _OBJECT_CO


def quantises(mixed_precision: Any) -> bool:
    """True when a container's ``mixed_precision`` (a recipe name or a config object) turns
    FP8 or FP4 on."""
    if isinstance(mixed_precision, str):
        name = mixed_precision.replace("-", "_")
        try:
            fields = dict(NAMED_PRECISIONS.get(name) or _resolved_fields(name))
        except (UsageError, ImportError):
            return False
    else:
        fields = {k: getattr(mixed_precision, k, None) for k in ("fp8", "fp4")}
    return bool(fields.get("fp8") or fields.get("fp4"))


def kept_quantisation(recipe: str | None, precision: str) -> str | None:
    """The recipe's own named mixed precision when it quantises (its recorded fields set
    ``fp8`` or ``fp4``) and the plan was priced at BF16: launch lines keep a recipe's
    precision for a BF16 plan (they never turn a recipe's FP8 off), so the run is then not
    what was priced.  None otherwise."""
    named = shape_of(recipe).mixed_precision if recipe else None
    fields = NAMED_PRECISIONS.get((named or "").replace("-", "_"), {})
    quantised = bool(fields.get("fp8") or fields.get("fp4"))
    return named if quantised and precision == "bf16" else None


#: Package data: the recipe names Megatron Bridge 0.3.1 exports from
#: ``megatron.bridge.recipes`` (``run_recipe.py --recipe`` finds a recipe only there).
EXPORTED_RECIPES_FILE = "bridge_recipes.json"


@lru_cache(maxsize=1)
def exported_recipes() -> frozenset[str]:
    """The names of :data:`EXPORTED_RECIPES_FILE` (read once; checked against the installed
    Bridge in ``tests/test_bridge_overrides.py``)."""
    text = resources.files(__package__).joinpath(EXPORTED_RECIPES_FILE).read_text()
    return frozenset(json.loads(text)["recipes"])


def recipe_note(name: str) -> str | None:
    """A note when ``name`` is not a recipe Bridge 0.3.1 exports (a newer Bridge's, the
    user's own, or a typo: "did you mean"); UsageError when it is no Python name at all,
    which ``run_recipe.py`` could never find.  None for an exported recipe."""
    if not name.isidentifier():
        raise UsageError(
            f"--recipe {name!r} is not a Python name; pass the name of a recipe function as "
            "run_recipe.py takes it, e.g. llama3_8b_pretrain_config"
        )
    known = exported_recipes()
    if name in known:
        return None
    near = nearest_recipe(name, known)
    return (
        f"recipe {name} is not one Megatron Bridge 0.3.1 exports from megatron.bridge.recipes"
        + (f" (did you mean {near}?)" if near else "")
        + "; the lines assume the sections of Bridge's base recipes (comm_overlap None, "
        "mixed_precision 'bf16_mixed')"
    )


def nearest_recipe(name: str, known: Iterable[str]) -> str | None:
    """The exported recipe ``name`` most likely means: ``name`` completed as Bridge names a
    recipe (``llama3_70b`` -> ``llama3_70b_pretrain_config``, the recipe a pretraining plan
    runs; ``llama3_70b_sft`` -> ``llama3_70b_sft_config``), else the closest spelling."""
    known = sorted(known)
    for completed in (f"{name}_pretrain_config", f"{name}_config"):
        if completed in known:
            return completed
    near = difflib.get_close_matches(name, known, n=1, cutoff=NEAR_RECIPE)
    return near[0] if near else None


#: Similarity (``difflib`` ratio) a recipe name needs to be offered as "did you mean": a typo
#: of a recipe's name scores 0.85 and more (``llama3_70b_pretrain_confg`` 0.98); a name sharing
#: only the ``_config`` suffix scores about 0.65 (``nope_config`` / ``qwen3_8b_peft_config``).
NEAR_RECIPE = 0.8


def recipe_model(recipe: str) -> str | None:
    """The preset whose Bridge recipe ``recipe`` is: its default recipe
    (:func:`~parastrat.adapters.megatron_launch.default_recipe`) or a variant of it (that
    name's stem then ``_``: ``llama3_70b_sft_config``, ``llama3_8b_16k_pretrain_config``), the
    longest stem winning; None for a recipe of no preset (the user's own, a newer Bridge's)."""
    from ..spec.models import names
    from .megatron_launch import default_recipe

    owner, longest = None, 0
    for model in names():
        own = default_recipe(model)
        if own is None:
            continue
        stem = own.removesuffix("_pretrain_config")
        if (recipe == own or recipe.startswith(stem + "_")) and len(stem) > longest:
            owner, longest = model, len(stem)
    return owner


def shape_of(recipe: Any) -> RecipeShape:
    """The shape of ``recipe``: a Bridge ``ConfigContainer`` (read from it), a recipe name
    (:data:`RECIPE_SHAPES`, else :data:`BASE_SHAPE`) or None (:data:`UNKNOWN_SHAPE`)."""
    if recipe is None:
        return UNKNOWN_SHAPE
    if isinstance(recipe, str):
        shape = RECIPE_SHAPES.get(recipe, BASE_SHAPE)
        tuned = any(word in recipe for word in ("finetune", "sft", "peft"))
        return replace(shape, dataset_seq="seq_length") if tuned else shape
    if not hasattr(recipe, "model") or not hasattr(recipe, "mixed_precision"):
        raise UsageError(
            f"recipe must be a Megatron Bridge recipe's name (run_recipe.py --recipe NAME) or "
            f"its ConfigContainer, got {type(recipe).__name__}"
        )
    mp = recipe.mixed_precision
    named = mp if isinstance(mp, str) else None
    return RecipeShape(
        comm_overlap=getattr(recipe, "comm_overlap", None) is not None,
        mixed_precision=named,
        named_fields=_resolved_fields(named) if named else None,
        has_mixed_precision=mp is not None,
        dataset_seq=_dataset_seq_key(getattr(recipe, "dataset", None)),
    )


def _dataset_seq_key(dataset: Any) -> str | None:
    """The dataclass field of ``dataset`` that holds its sequence length (see
    :attr:`RecipeShape.dataset_seq`)."""
    names = getattr(dataset, "__dataclass_fields__", {})
    return next((n for n in ("sequence_length", "seq_length") if n in names), None)


def _resolved_fields(name: str) -> tuple[tuple[str, Any], ...]:
    """The fields Bridge's named recipe sets (those differing from ``MixedPrecisionConfig``'s
    defaults), dtypes by name; read from the installed Bridge."""
    import dataclasses

    from .._deps import require

    mp = require("megatron.bridge.training.mixed_precision", "megatron", "a named recipe")
    try:
        resolved = mp.get_mixed_precision_config(name)
    except ValueError as err:
        raise UsageError(f"mixed_precision={name!r}: {err}") from None
    default = mp.MixedPrecisionConfig()
    out = []
    for f in dataclasses.fields(resolved):
        if f.name == "fp8_param":  # MixedPrecisionConfig keeps it equal to fp8_param_gather
            continue
        value = getattr(resolved, f.name)
        if value != getattr(default, f.name):
            if f.name in DTYPE_FIELDS and value is not None:
                value = str(value).removeprefix("torch.")
            out.append((f.name, value))
    return tuple(out)


#: One write of the field table: (its sections, first match first; its name; the value).
Write = tuple[tuple[str, ...], str, Any]


def override_lines(writes: Iterable[Write], shape: RecipeShape) -> list[str]:
    """Override lines for ``writes`` (the field table's ``(sections, name, value)`` in order)
    on a recipe of ``shape``: a field goes to the first of its sections the recipe has (a
    ``("comm_overlap", "model")`` field to the model without ``comm_overlap``), and the
    ``mixed_precision`` fields become one ``++mixed_precision={...}`` line on a named recipe
    (at the place of its first field)."""
    lines: list[str] = []
    precision: dict[str, Any] = {}
    at = None
    absent = shape.absent()
    for sections, name, value in writes:
        section = next((x for x in sections if x not in absent), None)
        if section is None:  # the section's own field, and the recipe has no such section
            continue
        if section == "dataset" and name == "sequence_length":
            if shape.dataset_seq is None:
                continue
            name = shape.dataset_seq
        if section == "mixed_precision" and shape.mixed_precision is not None:
            if at is None:
                at = len(lines)
                lines.append("")  # filled below, keeping the table's order
            precision[name] = value
            continue
        lines.append(f"{section}.{name}={hydra(value)}")
    if at is not None:
        lines[at] = "++mixed_precision=" + _precision_dict({**shape.precision_base(), **precision})
    return lines


def _precision_dict(fields: dict[str, Any]) -> str:
    """``{_target_: MixedPrecisionConfig, field: value, ...}`` in Hydra's grammar."""
    items = [f"_target_:{MIXED_PRECISION_TARGET}"]
    for name, value in fields.items():
        if name in DTYPE_FIELDS and value is not None:
            items.append(f"{name}:{{_target_:torch.{value},_call_:false}}")
        else:
            items.append(f"{name}:{hydra(value)}")
    return "{" + ",".join(items) + "}"


def hydra(value: Any) -> str:
    """A value in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra(v) for v in value) + "]"
    if isinstance(value, str) and (
        not _BARE.fullmatch(value) or value.lower() in ("null", "true", "false", "nan", "inf")
    ):
        # a layout such as Et*4|(t*4|)*14tmL is a grammar error unquoted; quoted, a string
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value)


#: Strings Hydra's override grammar reads as themselves without quotes.
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_.+-]*")
