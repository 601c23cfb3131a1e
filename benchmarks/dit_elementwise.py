"""Count the element-wise traffic of each DiT family's real diffusers block, eager.

    python benchmarks/dit_elementwise.py [--json]

Runs one forward of each transformer block class the DiT presets use (diffusers, installed) on
the CPU in bf16 under a ``TorchDispatchMode`` and adds up the bytes every ATen operation reads
and writes, except the matrix products (``mm``/``addmm``/``bmm``: priced as GEMMs), the
attention core (``scaled_dot_product_attention`` and its backends: priced as attention) and
views.  That is the HBM traffic of the eager element-wise kernels -- norms with their fp32
upcasts, modulation, gates, RoPE, layout copies, concatenations, residual adds, activations --
as the block's own code issues them.  The block is built with the model's head dimension,
MLP ratio, QK norm, RoPE and text width (few heads and short sequences: the traffic per token
is linear in the widths), and the MLP's own traffic is counted separately, so the result is
per token: ``hidden_bytes`` per hidden-width element and ``ffn_bytes`` per MLP-hidden element.
``parastrat.spec.dit.EAGER_TRAFFIC`` quotes the numbers this prints (docs/accuracy-dit.md,
"This revision"); ``estimate_dit`` prices eager element-wise kernels from them.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable
from typing import Any

#: ATen operations that are not element-wise traffic (GEMMs, attention, views, allocation).
NOT_ELEMENTWISE = frozenset(
    {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "linear",
        "matmul",
        "scaled_dot_product_attention",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "view",
        "_unsafe_view",
        "reshape",
        "_reshape_alias",
        "transpose",
        "permute",
        "expand",
        "unsqueeze",
        "squeeze",
        "t",
        "slice",
        "select",
        "split",
        "split_with_sizes",
        "unbind",
        "chunk",
        "alias",
        "as_strided",
        "detach",
        "unflatten",
        "flatten",
        "narrow",
        "view_as_real",
        "view_as_complex",
        "lift_fresh",
        "empty",
        "empty_like",
        "new_empty",
        "empty_strided",
    }
)
#: Tensors this small (per-sample modulation vectors, scalars) are not per-token traffic.
SMALL = 4096

T_IMG, T_TXT, HEADS = 1024, 128, 4


def traffic(fn: Callable[[], Any]) -> float:
    """Bytes the element-wise ATen operations of ``fn()`` read and write (after a warm-up)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Count(TorchDispatchMode):
        total = 0.0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            if func.__name__.split(".")[0] not in NOT_ELEMENTWISE:
                for t in tree_flatten((args, kwargs or {}))[0] + tree_flatten(out)[0]:
                    if isinstance(t, torch.Tensor) and t.numel() > SMALL:
                        self.total += t.numel() * t.element_size()
            return out

    with torch.no_grad():
        fn()
        mode = Count()
        with mode:
            fn()
    return mode.total


def _blocks() -> dict[str, Callable[[], tuple[float, float, int, int, int, int]]]:
    """Per (preset family, block kind): a function returning (total bytes, MLP bytes, image
    tokens, text tokens, hidden width, MLP width) of one block forward."""
    import torch

    bf = torch.bfloat16
    ti, tt = T_IMG, T_TXT

    def rnd(*shape: int, dtype: Any = bf) -> Any:
        return torch.randn(*shape, dtype=dtype)

    def flux(kind: str) -> tuple[float, float, int, int, int, int]:
        from diffusers.models.transformers.transformer_flux import (
            FluxSingleTransformerBlock,
            FluxTransformerBlock,
        )

        d = 128
        h = HEADS * d
        rope = (torch.randn(ti + tt, d), torch.randn(ti + tt, d))
        x, e, temb = rnd(1, ti, h), rnd(1, tt, h), rnd(1, h)
        if kind == "double":
            b = FluxTransformerBlock(h, HEADS, d).to(bf)
            tot = traffic(lambda: b(x, e, temb, image_rotary_emb=rope))
            mlp = traffic(lambda: b.ff(x)) + traffic(lambda: b.ff_context(e))
        else:
            b = FluxSingleTransformerBlock(h, HEADS, d).to(bf)
            tot = traffic(lambda: b(x, e, temb, image_rotary_emb=rope))
            mlp = traffic(lambda: b.act_mlp(rnd(1, ti + tt, 4 * h)))
        return tot, mlp, ti, tt, h, 4 * h

    def hunyuan(kind: str) -> tuple[float, float, int, int, int, int]:
        from diffusers.models.transformers.transformer_hunyuan_video import (
            HunyuanVideoSingleTransformerBlock,
            HunyuanVideoTransformerBlock,
        )

        d = 128
        h = HEADS * d
        rope = (torch.randn(ti, d), torch.randn(ti, d))
        x, e, temb = rnd(1, ti, h), rnd(1, tt, h), rnd(1, h)
        if kind == "double":
            b = HunyuanVideoTransformerBlock(HEADS, d, 4.0).to(bf)
            tot = traffic(lambda: b(x, e, temb, freqs_cis=rope))
            mlp = traffic(lambda: b.ff(x)) + traffic(lambda: b.ff_context(e))
        else:
            b = HunyuanVideoSingleTransformerBlock(HEADS, d, 4.0).to(bf)
            tot = traffic(lambda: b(x, e, temb, image_rotary_emb=rope))
            mlp = traffic(lambda: b.act_mlp(rnd(1, ti + tt, 4 * h)))
        return tot, mlp, ti, tt, h, 4 * h

    def sd3(qk_norm: str | None) -> tuple[float, float, int, int, int, int]:
        from diffusers.models.attention import JointTransformerBlock

        d = 64
        h = HEADS * d
        b = JointTransformerBlock(h, HEADS, d, qk_norm=qk_norm).to(bf)
        x, e, temb = rnd(1, ti, h), rnd(1, tt, h), rnd(1, h)
        tot = traffic(lambda: b(x, e, temb))
        mlp = traffic(lambda: b.ff(x)) + traffic(lambda: b.ff_context(e))
        return tot, mlp, ti, tt, h, 4 * h

    def cogvideox(rope: bool) -> tuple[float, float, int, int, int, int]:
        from diffusers.models.transformers.cogvideox_transformer_3d import CogVideoXBlock

        d = 64
        h = HEADS * d
        b = CogVideoXBlock(h, HEADS, d, time_embed_dim=h).to(bf)
        x, e, temb = rnd(1, ti, h), rnd(1, tt, h), rnd(1, h)
        freqs = (torch.randn(ti, d), torch.randn(ti, d)) if rope else None
        tot = traffic(lambda: b(x, e, temb, image_rotary_emb=freqs))
        mlp = traffic(lambda: b.ff(torch.cat([e, x], dim=1)))
        return tot, mlp, ti, tt, h, 4 * h

    def mochi() -> tuple[float, float, int, int, int, int]:
        from diffusers.models.transformers.transformer_mochi import MochiTransformerBlock

        d = 128
        h = HEADS * d
        b = MochiTransformerBlock(h, HEADS, d, pooled_projection_dim=h // 2).to(bf)
        x, e, temb = rnd(1, ti, h), rnd(1, tt, h // 2), rnd(1, h)
        mask = torch.ones(1, tt, dtype=torch.bool)
        rope = (torch.randn(ti, HEADS, d // 2), torch.randn(ti, HEADS, d // 2))
        tot = traffic(lambda: b(x, e, temb, encoder_attention_mask=mask, image_rotary_emb=rope))
        mlp = traffic(lambda: b.ff(x)) + traffic(lambda: b.ff_context(e))
        # per element of the preset's ffn_hidden_size (4 x hidden: SwiGLU's two 8/3 x halves
        # are the same matrices as a 4x MLP, spec/dit_config.py)
        return tot, mlp, ti, tt, h, 4 * h

    def wan(ffn_ratio: float) -> tuple[float, float, int, int, int, int]:
        from diffusers.models.transformers.transformer_wan import (
            WanRotaryPosEmbed,
            WanTransformerBlock,
        )

        d = 128
        h = HEADS * d
        ffn = int(ffn_ratio * h)
        b = WanTransformerBlock(h, ffn, HEADS, cross_attn_norm=True).to(bf)
        latent = torch.zeros(1, 16, 4, 16, 32)  # 4 x 8 x 16 = 512 tokens after 1x2x2 patches
        rope = WanRotaryPosEmbed(d, (1, 2, 2), 1024)(latent)
        n = 4 * 8 * 16
        x, e, temb = rnd(1, n, h), rnd(1, tt, h), rnd(1, 6, h, dtype=torch.float32)
        tot = traffic(lambda: b(x, e, temb, rope))
        mlp = traffic(lambda: b.ffn(x))
        return tot, mlp, n, 0, h, ffn

    def qwen() -> tuple[float, float, int, int, int, int]:
        from diffusers.models.transformers.transformer_qwenimage import QwenImageTransformerBlock

        d = 128
        h = HEADS * d
        b = QwenImageTransformerBlock(h, HEADS, d).to(bf)
        x, e, temb = rnd(1, ti, h), rnd(1, tt, h), rnd(1, h)
        mask = torch.ones(1, tt, dtype=torch.bool)
        rope = (
            torch.polar(torch.ones(ti, d // 2), torch.randn(ti, d // 2)),
            torch.polar(torch.ones(tt, d // 2), torch.randn(tt, d // 2)),
        )
        tot = traffic(lambda: b(x, e, mask, temb, image_rotary_emb=rope))
        mlp = traffic(lambda: b.img_mlp(x)) + traffic(lambda: b.txt_mlp(e))
        return tot, mlp, ti, tt, h, 4 * h

    return {
        "flux double": lambda: flux("double"),
        "flux single": lambda: flux("single"),
        "hunyuanvideo double": lambda: hunyuan("double"),
        "hunyuanvideo single": lambda: hunyuan("single"),
        "sd3 double": lambda: sd3(None),
        "sd3.5 double": lambda: sd3("rms_norm"),
        "cogvideox-2b joint": lambda: cogvideox(False),
        "cogvideox-5b joint": lambda: cogvideox(True),
        "mochi double": mochi,
        "wan2.1 cross": lambda: wan(13824 / 5120),
        "qwen-image double": qwen,
    }


def count() -> dict[str, dict[str, float]]:
    """Per (family, kind): element-wise bytes per token per hidden element (``hidden_bytes``)
    and per MLP-hidden element (``ffn_bytes``), and the kernel-free byte totals behind them."""
    out = {}
    for name, fn in _blocks().items():
        tot, mlp, ti, tt, h, ffn = fn()
        tokens = ti + tt
        out[name] = {
            "hidden_bytes": (tot - mlp) / (tokens * h),
            "ffn_bytes": mlp / (tokens * ffn),
            "total_bytes": tot,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON document")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    res = count()
    if args.json:
        json.dump(res, sys.stdout, indent=1)
        print()
        return 0
    import diffusers

    print(f"diffusers {diffusers.__version__}: eager element-wise bytes per token")
    for name, r in res.items():
        print(
            f"  {name:22} {r['hidden_bytes']:6.1f} B per hidden element, "
            f"{r['ffn_bytes']:5.1f} B per MLP-hidden element"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
