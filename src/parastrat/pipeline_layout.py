"""Megatron's ``pipeline_model_parallel_layout``: which layers each pipeline stage builds.

A layout lists the pipeline stages in Megatron's order (stage ``i`` is virtual chunk
``i // pp`` of pipeline rank ``i % pp``), each stage a list of layers: ``E`` / "embedding",
``t`` / "decoder", ``m`` / "mtp" and ``L`` / "loss".  Two spellings are accepted, with the
semantics of Megatron Core 0.16.1's ``PipelineParallelLayerLayout``
(``megatron/core/transformer/pipeline_parallel_layer_layout.py``):

* a string: ``|`` separates stages, commas are cosmetic, ``(..)*n`` then ``x*n`` repeat
  (no nesting), e.g. ``"Et*4|(t*4|)*14tmL"``;
* a list of lists of layer names (case and surrounding blanks ignored), e.g.
  ``[["embedding", "decoder"], ["decoder", "loss"]]``; a list of tuples is accepted too.

The virtual pipeline size is inferred: ``vpp = stages / pp``.  :func:`layout_violations`
gives Megatron's refusals (stage count vs pp, one embedding first, one loss last, decoder and
MTP counts, MTP placement) as rule violations with the numbers and a fix.  Pure Python: no
torch, no megatron.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .errors import StrategyError, Violation

#: Megatron's ``LayerType`` member names (``encoder`` parses but is refused for layouts).
LAYER_TYPES = ("embedding", "loss", "encoder", "decoder", "mtp")
#: The one-letter spelling of the string form.
LAYER_CHARS = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}
_CHAR_OF = {v: k for k, v in LAYER_CHARS.items()}

#: What :class:`~parastrat.Strategy` stores: the string, or the list form as nested tuples.
LayoutValue = str | tuple[tuple[str, ...], ...]

# Megatron unrolls "(ab|c)*n" first (innermost parentheses only), then "x*n", each in one pass.
_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")
_SINGLE = re.compile(r"(.)\*(\d+)")


@dataclass(frozen=True)
class StagePlacement:
    """What one (pipeline rank, virtual chunk) builds."""

    pp_rank: int
    chunk: int
    embedding: bool
    decoder: int
    mtp: int
    loss: bool

    @property
    def weight(self) -> int:
        """Layers counted the way recipe authors balance stages (embedding and loss count 1)."""
        return self.decoder + self.mtp + self.embedding + self.loss


def _stages_fix(stages: int, pp: int) -> str:
    """The fix when a layout's ``stages`` are not a multiple of ``pp``: a layout of pp * vpp
    stages, or a pp above 1 dividing its stages (pp=1 takes no multi-stage layout)."""
    fix = f"give pp * vpp stages, e.g. {pp} or {2 * pp} for pp={pp}"
    pps = [d for d in _divisors(stages) if d > 1]
    if stages > 1 and pps:
        fix += f", or use pp in {{{', '.join(map(str, pps))}}}"
    return fix


def _layout_error(message: str, hint: str, rule: str = "pipeline-layout") -> StrategyError:
    return StrategyError(Violation(rule, message, hint))


#: Longest layout a string may unroll to (characters): 16 x the largest model's 4,096 layers,
#: so a mistyped repeat count is refused before it is expanded (``t*99999999999999``).
MAX_UNROLLED = 65_536


def _unroll(text: str) -> str:
    text = text.replace(",", "")
    grouped = _GROUP.sub(lambda m: _repeat(text, m.group(1), m.group(2)), text)
    out = _SINGLE.sub(lambda m: _repeat(text, m.group(1), m.group(2)), grouped)
    if len(out) > MAX_UNROLLED:
        raise _layout_error(
            f"pipeline_layout {text[:80]!r} unrolls to {len(out):,} layers, past {MAX_UNROLLED:,}",
            "give each stage's layers; a model has at most 4,096 decoder layers",
        )
    return out


def _repeat(text: str, part: str, count: str) -> str:
    """``part`` ``count`` times, refused past :data:`MAX_UNROLLED` characters."""
    if len(count) > 6 or len(part) * int(count) > MAX_UNROLLED:
        shown = count if len(count) <= 20 else count[:20] + "..."
        raise _layout_error(
            f"pipeline_layout {text[:80]!r}: {part[:20]}*{shown} repeats past "
            f"{MAX_UNROLLED:,} layers",
            "give each stage's layers; a model has at most 4,096 decoder layers",
        )
    return part * int(count)


@lru_cache(maxsize=4096)
def parse_string(text: str) -> tuple[tuple[str, ...], ...]:
    """The stages of a layout string, each a tuple of layer names; StrategyError on an
    unknown character.  Memoised: the planner builds thousands of strategies that share a few
    layouts."""
    stages = []
    for stage in _unroll(text).split("|"):
        bad = sorted({c for c in stage if c not in LAYER_CHARS})
        if bad:
            raise _layout_error(
                f"pipeline_layout {text!r}: unknown layer character(s) {bad} in stage {stage!r}",
                "write stages with E (embedding), t (decoder), m (MTP), L (loss), '|' between "
                "stages, (..)*n or x*n to repeat, e.g. 'Et*4|(t*4|)*14tmL'",
            )
        stages.append(tuple(LAYER_CHARS[c] for c in stage))
    return tuple(stages)


def _parse_rows(rows: Sequence[Any]) -> tuple[tuple[str, ...], ...]:
    stages = []
    for i, row in enumerate(rows):
        if not isinstance(row, (list, tuple)):
            raise _layout_error(
                f"pipeline_layout stage {i} is a {type(row).__name__}, not a list of layer names",
                'give a list of lists, e.g. [["embedding", "decoder"], ["decoder", "loss"]]',
            )
        names = []
        for item in row:
            name = getattr(item, "name", item)  # a megatron LayerType reads as its name
            key = name.strip().lower() if isinstance(name, str) else None
            if key not in LAYER_TYPES:
                raise _layout_error(
                    f"pipeline_layout stage {i}: {item!r} is not a layer type",
                    f"use one of {', '.join(LAYER_TYPES[:2] + LAYER_TYPES[3:])}",
                )
            names.append(key)
        stages.append(tuple(names))
    return tuple(stages)


def normalize(layout: Any) -> LayoutValue:
    """A layout as :class:`~parastrat.Strategy` stores it (a string, or nested tuples), after
    the syntax checks; StrategyError for anything else."""
    if isinstance(layout, PipelineLayout):
        return layout.value
    if isinstance(layout, str):
        parse_string(layout)
        return layout
    if isinstance(layout, (list, tuple)):
        return _parse_rows(layout)
    raise _layout_error(
        f"pipeline_layout={layout!r} is a {type(layout).__name__}",
        "pass Megatron's layout string (e.g. 'Et*4|(t*4|)*14tmL') or a list of lists of layer "
        "names",
    )


@lru_cache(maxsize=1024)
def _stages(value: LayoutValue) -> tuple[tuple[str, ...], ...]:
    return parse_string(value) if isinstance(value, str) else value


@dataclass(frozen=True)
class PipelineLayout:
    """A parsed layout for ``pp`` pipeline ranks (``vpp`` is inferred)."""

    value: LayoutValue
    pp: int

    @classmethod
    def parse(cls, layout: Any, pp: int) -> PipelineLayout:
        """Parse ``layout`` for ``pp`` ranks; StrategyError when the stages do not divide."""
        value = normalize(layout)
        n = len(_stages(value))
        if n == 0 or n % pp:
            raise _layout_error(
                f"pipeline_layout has {n} stage(s), not a positive multiple of pp={pp} "
                "(Megatron infers vpp = stages / pp)",
                _stages_fix(n, pp),
                rule="pipeline-layout-pp",
            )
        return cls(value, pp)

    @property
    def stages(self) -> tuple[tuple[str, ...], ...]:
        """Every stage's layer names, in Megatron's order (chunk-major)."""
        return _stages(self.value)

    @property
    def vpp(self) -> int:
        """Virtual chunks per pipeline rank: stages / pp."""
        return len(self.stages) // self.pp

    def stage(self, pp_rank: int, chunk: int = 0) -> tuple[str, ...]:
        """The layers of virtual chunk ``chunk`` on pipeline rank ``pp_rank``."""
        return self.stages[chunk * self.pp + pp_rank]

    def placement(self, pp_rank: int, chunk: int = 0) -> StagePlacement:
        """What (``pp_rank``, ``chunk``) builds."""
        layers = self.stage(pp_rank, chunk)
        return StagePlacement(
            pp_rank,
            chunk,
            "embedding" in layers,
            layers.count("decoder"),
            layers.count("mtp"),
            "loss" in layers,
        )

    def placements(self) -> list[StagePlacement]:
        """Every (rank, chunk) placement, rank-major."""
        return [self.placement(r, c) for r in range(self.pp) for c in range(self.vpp)]

    def count(self, layer: str) -> int:
        """How many layers of type ``layer`` the whole layout holds."""
        return sum(s.count(layer) for s in self.stages)

    def to_megatron(self) -> str | list[list[str]]:
        """The value ``TransformerConfig.pipeline_model_parallel_layout`` takes."""
        if isinstance(self.value, str):
            return self.value
        return [list(s) for s in self.value]

    def __str__(self) -> str:
        return compact(self.value)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0][:8]


def _stage_text(stage: Sequence[str]) -> str:
    out, i = [], 0
    while i < len(stage):
        j = i
        while j < len(stage) and stage[j] == stage[i]:
            j += 1
        char = _CHAR_OF.get(stage[i], "?")
        out.append(char if j - i == 1 else f"{char}*{j - i}")
        i = j
    return "".join(out)


def compact(value: LayoutValue) -> str:
    """The layout in the string syntax, repeated stages folded (``Et*4|(t*4|)*14|tmL``); a
    string is shown as given."""
    if isinstance(value, str):
        return value
    texts = [_stage_text(s) for s in value]
    out, i = [], 0
    while i < len(texts):
        j = i
        while j < len(texts) and texts[j] == texts[i]:
            j += 1
        run = j - i
        last = j == len(texts)
        if run > 2 and texts[i] and not last:
            out.append(f"({texts[i]}|)*{run}")
        else:
            out.append("|".join(texts[i:j]) + ("" if last else "|"))
        i = j
    return "".join(out)


def layout_violations(
    layout: PipelineLayout, num_layers: int, mtp_num_layers: int | None = None
) -> list[Violation]:
    """Megatron's checks of a layout against the model (``validate_layer_layout``): one
    embedding first, one loss last, ``num_layers`` decoder layers, ``mtp_num_layers`` MTP
    layers after every decoder layer, all in the last chunk of one rank."""
    flat = [layer for stage in layout.stages for layer in stage]
    mtp = mtp_num_layers or 0
    shown = compact(layout.value)
    found = _end_problems(flat) + _decoder_problems(flat, num_layers)
    found += _mtp_problems(layout, flat, mtp)
    return [
        Violation(rule, f"pipeline_layout {shown!r}: {text}", hint) for rule, text, hint in found
    ]


#: (rule id, message without the layout, hint): what the checks below find.
_Problem = tuple[str, str, str]


def _end_problems(flat: list[str]) -> list[_Problem]:
    """No encoder; exactly one embedding, first; exactly one loss, last."""
    out: list[_Problem] = []
    if flat.count("encoder"):
        out.append(
            (
                "pipeline-layout-encoder",
                "encoder layers are not supported in layouts "
                "(Megatron Core raises NotImplementedError)",
                "drop the encoder layers",
            )
        )
    if flat.count("embedding") != 1 or not flat or flat[0] != "embedding":
        out.append(
            (
                "pipeline-layout-embedding",
                f"holds {flat.count('embedding')} embedding(s) and "
                "starts with " + (repr(flat[0]) if flat else "nothing"),
                "put exactly one E at the very start of the first stage, e.g. 'Et*4|...'",
            )
        )
    if flat.count("loss") != 1 or not flat or flat[-1] != "loss":
        out.append(
            (
                "pipeline-layout-loss",
                f"holds {flat.count('loss')} loss layer(s) and ends with "
                + (repr(flat[-1]) if flat else "nothing"),
                "put exactly one L at the very end of the last stage, e.g. '...|t*4L'",
            )
        )
    return out


def _decoder_problems(flat: list[str], num_layers: int) -> list[_Problem]:
    """The model's decoder layers, no more and no fewer."""
    decoders = flat.count("decoder")
    if decoders == num_layers:
        return []
    return [
        (
            "pipeline-layout-layers",
            f"{decoders} decoder layers (t) but the model has {num_layers}",
            f"give the stages {num_layers} t in total "
            f"({'add' if decoders < num_layers else 'remove'} {abs(num_layers - decoders)})",
        )
    ]


def _mtp_problems(layout: PipelineLayout, flat: list[str], mtp: int) -> list[_Problem]:
    """The model's MTP layers, after every decoder layer, all in the last chunk of one rank."""
    found = flat.count("mtp")
    if found != mtp:
        return [
            (
                "pipeline-layout-mtp",
                f"{found} MTP layers (m) but the model has {mtp}",
                f"put {mtp} m in the last chunk of one rank, before the L"
                if mtp
                else "drop the m layers",
            )
        ]
    if not found:
        return []
    if "decoder" in flat[flat.index("mtp") :]:
        return [
            (
                "pipeline-layout-mtp",
                "decoder layers come after an MTP layer",
                "place the m layers after every t",
            )
        ]
    chunks = [
        (r, c) for r in range(layout.pp) for c in range(layout.vpp) if "mtp" in layout.stage(r, c)
    ]
    if all(c == layout.vpp - 1 for _, c in chunks) and len(chunks) == 1:
        return []
    return [
        (
            "pipeline-layout-mtp",
            f"MTP layers sit in (rank, chunk) {chunks}; Megatron "
            f"wants all {mtp} in the last chunk (chunk {layout.vpp - 1}) of one rank",
            "move every m into one of the last stages (the last pp stages of the string)",
        )
    ]


def check_layout(
    layout: Any, pp: int, num_layers: int, mtp_num_layers: int | None = None
) -> PipelineLayout:
    """Parse and check ``layout`` for a model; StrategyError listing every refusal."""
    parsed = PipelineLayout.parse(layout, pp)
    problems = layout_violations(parsed, num_layers, mtp_num_layers)
    if problems:
        raise StrategyError(problems)
    return parsed


def resolve_layout(layout: Any, pp: int, vpp: int) -> tuple[LayoutValue, int]:
    """``(stored value, vpp)`` for a strategy with ``pp`` ranks: vpp follows from the layout;
    an explicit vpp other than 1 must agree with it (as Megatron asserts)."""
    parsed = PipelineLayout.parse(layout, pp)
    if vpp != 1 and vpp != parsed.vpp:
        raise _layout_error(
            f"vpp={vpp} but pipeline_layout has {len(parsed.stages)} stages = pp {pp} x "
            f"vpp {parsed.vpp}",
            f"drop vpp (the layout sets it) or give {pp * vpp} stages",
            rule="pipeline-layout-vpp",
        )
    return parsed.value, parsed.vpp


# ---------------------------------------------------------------------------------------------
# Every split as a layout, and layouts the way recipe authors write them.
# ---------------------------------------------------------------------------------------------
def _chunk_sizes(total: int, parts: int) -> list[int]:
    """Megatron's even split: ``total / parts`` each (callers check divisibility)."""
    return [total // parts] * parts


def split_stages(
    num_layers: int,
    pp: int,
    vpp: int = 1,
    *,
    first_stage_layers: int | None = None,
    last_stage_layers: int | None = None,
    account_for_embedding: bool = False,
    account_for_loss: bool = False,
    mtp_num_layers: int = 0,
) -> PipelineLayout:
    """The layout Megatron Core builds for a split given without a layout: decoder layers per
    (rank, chunk) from the even split, ``account_for_*`` (embedding / loss take one slot of
    the first / last chunk) or first/last stage counts (each spread evenly over its chunks),
    the embedding in the first chunk, MTP layers and the loss in the last.  The caller checks
    divisibility first (:func:`parastrat.rules.layer_split_violations`)."""
    n = pp * vpp
    if account_for_embedding or account_for_loss:
        sizes = _chunk_sizes(num_layers + account_for_embedding + account_for_loss, n)
        sizes[0] -= account_for_embedding
        sizes[-1] -= account_for_loss
    elif first_stage_layers is not None or last_stage_layers is not None:
        middle = pp - (first_stage_layers is not None) - (last_stage_layers is not None)
        rest = num_layers - (first_stage_layers or 0) - (last_stage_layers or 0)
        per_rank = [rest // middle if middle else 0] * pp
        if first_stage_layers is not None:
            per_rank[0] = first_stage_layers
        if last_stage_layers is not None:
            per_rank[-1] = last_stage_layers
        sizes = [per_rank[i % pp] // vpp for i in range(n)]  # stage i = chunk i//pp, rank i%pp
    else:
        sizes = _chunk_sizes(num_layers, n)
    stages = [["decoder"] * max(k, 0) for k in sizes]
    stages[0].insert(0, "embedding")
    stages[-1] += ["mtp"] * mtp_num_layers + ["loss"]
    return PipelineLayout(tuple(tuple(s) for s in stages), pp)


def recipe_layouts(num_layers: int, pp: int, vpp: int = 1, mtp_num_layers: int = 0) -> list[str]:
    """Layouts written the way recipe authors write them, most balanced first, each one
    Megatron accepts for the model.

    The embedding and the loss each count as a slot or as nothing (four ways), MTP layers
    count one slot each; with ``k = ceil(slots / stages)``, the first stage holds the
    embedding and ``k`` slots' worth of decoders, every middle stage exactly ``k`` decoders
    (balanced), the last the decoders left with the MTP layers and the loss.  Among layouts
    of equal ``k``, those with fewer empty stages, then those that give the embedding and the
    loss a slot, come first.  DeepSeek-V3 (61 + 1 MTP) at pp 8 vpp 2 gives Bridge's recipe
    ``Et*4|(t*4|)*14tmL`` among them; at pp 8 vpp 4, NVIDIA's ``Et|(tt|)*30mL``.  Empty for
    a single stage (nothing to lay out).
    """
    n = pp * vpp
    found: dict[str, tuple[int, int, int]] = {}
    for emb_w in (0, 1) if n > 1 else ():
        for loss_w in (0, 1):
            slots = num_layers + emb_w + mtp_num_layers + loss_w
            k = -(-slots // n)
            first = k - emb_w
            last = num_layers - first - (n - 2) * k
            if first < 0 or last < 0:
                continue
            stages = [["decoder"] * c for c in [first] + [k] * (n - 2) + [last]]
            stages[0].insert(0, "embedding")
            stages[-1] += ["mtp"] * mtp_num_layers + ["loss"]
            rows = tuple(tuple(s) for s in stages)
            if layout_violations(PipelineLayout(rows, pp), num_layers, mtp_num_layers):
                continue
            key, text = (k, sum(1 for s in rows if not s), -emb_w - loss_w), compact(rows)
            found[text] = min(found.get(text, key), key)
    return sorted(found, key=lambda text: (found[text], text))
