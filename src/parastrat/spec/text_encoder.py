"""Text encoders of the DiT presets: the work one prompt costs.

An encoder runs once per prompt (twice with classifier-free guidance: the negative prompt too)
before the denoising loop, on one device.  Its cost is a forward pass over the prompt's tokens:
``2 x (parameters - embedding table)`` FLOPs per token for the matrices, plus the attention
core ``4 x layers x tokens x hidden`` per token; and, for short prompts, streaming the weights
once (``2 x parameters`` bytes in BF16), whichever is slower.  Sizes are the published
architectures (model cards / config.json), counted for the part the pipelines run (the text
tower of a vision-language model; HunyuanVideo stops LLaVA two layers short of the top).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecError


@dataclass(frozen=True)
class TextEncoder:
    """One text encoder as a pipeline runs it: ``params`` (of which ``embed_params`` is the
    token-embedding table, a lookup), ``layers`` of width ``hidden``, over ``tokens`` tokens."""

    name: str
    params: float
    embed_params: float
    layers: int
    hidden: int
    tokens: int
    source: str = ""

    def __post_init__(self) -> None:
        if not (self.params > 0 and 0 <= self.embed_params < self.params):
            raise SpecError(f"text encoder {self.name!r}: need params > embed_params >= 0")
        if self.tokens < 1 or self.layers < 1 or self.hidden < 1:
            raise SpecError(f"text encoder {self.name!r}: tokens, layers, hidden must be >= 1")

    @property
    def flops(self) -> float:
        """Forward FLOPs for one prompt."""
        dense = 2.0 * (self.params - self.embed_params) * self.tokens
        attn = 4.0 * self.layers * self.tokens * self.tokens * self.hidden
        return dense + attn

    def weight_bytes(self, nbytes: int = 2) -> float:
        """Bytes of the weights a forward streams once."""
        return self.params * nbytes

    def with_tokens(self, tokens: int) -> TextEncoder:
        """The same encoder over another prompt length (a pipeline's max_sequence_length)."""
        return TextEncoder(
            self.name, self.params, self.embed_params, self.layers, self.hidden, tokens, self.source
        )


#: CLIP ViT-L/14 text tower (SD3, FLUX, HunyuanVideo pooled embedding): 123 M parameters,
#: 12 layers of width 768, 77 tokens.
CLIP_L = TextEncoder(
    "clip-l", 0.123e9, 49408 * 768, 12, 768, 77, "openai/clip-vit-large-patch14 config.json"
)
#: OpenCLIP ViT-bigG/14 text tower (SD3): 695 M parameters, 32 layers of width 1280, 77 tokens.
CLIP_G = TextEncoder(
    "clip-g", 0.695e9, 49408 * 1280, 32, 1280, 77, "laion/CLIP-ViT-bigG-14 text_config"
)
#: T5 v1.1 XXL encoder (FLUX, SD3, CogVideoX, Mochi): 4.76 B parameters, 24 layers, d_model
#: 4096, vocabulary 32,128; the token count is the pipeline's max_sequence_length.
T5_XXL = TextEncoder(
    "t5-v1.1-xxl-encoder", 4.76e9, 32128 * 4096, 24, 4096, 512, "google/t5-v1_1-xxl config.json"
)
#: umT5-XXL encoder (Wan): 5.68 B parameters, 24 layers, d_model 4096, vocabulary 256,384;
#: Wan pads prompts to text_len 512.
UMT5_XXL = TextEncoder(
    "umt5-xxl-encoder", 5.68e9, 256384 * 4096, 24, 4096, 512, "google/umt5-xxl; Wan2.1 text_len 512"
)
#: LLaVA-LLaMA-3-8B text tower as HunyuanVideo runs it: Llama-3-8B's 32 layers of width 4096
#: (vocabulary 128,256), the hidden state taken 2 layers below the top (30 layers run);
#: 256 prompt tokens + the 95-token template HunyuanVideo crops afterwards.
LLAVA_LLAMA3_8B = TextEncoder(
    "llava-llama-3-8b-text",
    7.5e9 * 30 / 32 + 128256 * 4096,
    128256 * 4096,
    30,
    4096,
    256 + 95,
    "xtuner/llava-llama-3-8b-v1_1; HunyuanVideo prompt_template_encode crop_start 95, layer -3",
)
#: Qwen2.5-VL-7B language model as Qwen-Image runs it: 28 layers of width 3584, 7.6 B parameters
#: (vocabulary 152,064), prompt up to 512 tokens + the 34-token template it drops.
QWEN25_VL_7B = TextEncoder(
    "qwen2.5-vl-7b-text",
    7.6e9,
    152064 * 3584,
    28,
    3584,
    512 + 34,
    "Qwen/Qwen2.5-VL-7B-Instruct config.json; QwenImagePipeline prompt_template_encode_start_idx",
)

__all__ = [
    "CLIP_G",
    "CLIP_L",
    "LLAVA_LLAMA3_8B",
    "QWEN25_VL_7B",
    "T5_XXL",
    "UMT5_XXL",
    "TextEncoder",
]
