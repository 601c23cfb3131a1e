"""Measure the host's cost of turning a decoded image into PIL images, per output element.

    python benchmarks/dit_postprocess.py [--repeat N]

diffusers pipelines end with ``image_processor.postprocess(image, output_type="pil")`` (the
default ``output_type`` of the FLUX, SD3, CogVideoX and Mochi pipelines, and of xDiT's
``InputConfig``): the denormalisation runs on the device, then ``pt_to_numpy`` copies the
tensor to the host and converts it to a float32 channels-last array
(``.cpu().permute(0, 2, 3, 1).float().numpy()``) and ``numpy_to_pil`` rounds it to uint8
(``(x * 255).round().astype("uint8")``) and wraps each image in a PIL ``Image``.  Those two host
steps are timed here with diffusers' own functions on a bf16 image of 1024^2 and 2048^2 pixels
(three channels) and reported as host seconds per output element; the median of ``--repeat``
runs after one warm-up.  ``parastrat.estimate.dit_serial.POSTPROCESS_S_PER_ELEMENT`` quotes
this measurement (docs/accuracy-dit.md, "This revision").
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time


def measure(size: int, repeat: int) -> tuple[float, float]:
    """Median host seconds per output element for one ``size`` x ``size`` RGB image:
    ``pt_to_numpy`` alone (``output_type="np"``) and with ``numpy_to_pil`` (``"pil"``)."""
    import torch
    from diffusers.image_processor import VaeImageProcessor

    image = (torch.rand(1, 3, size, size) * 2 - 1).to(torch.bfloat16)
    image = (image / 2 + 0.5).clamp(0, 1)  # the device-side denormalisation, done beforehand
    to_np, to_pil = [], []
    for i in range(repeat + 1):
        t0 = time.perf_counter()
        arr = VaeImageProcessor.pt_to_numpy(image)
        t1 = time.perf_counter()
        VaeImageProcessor.numpy_to_pil(arr)
        t2 = time.perf_counter()
        if i:  # the first run warms the allocator up
            to_np.append(t1 - t0)
            to_pil.append(t2 - t0)
    n = image.numel()
    return statistics.median(to_np) / n, statistics.median(to_pil) / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="timed runs per size (median)")
    args = ap.parse_args()
    import torch

    print(
        f"host: {platform.processor() or platform.machine()}, torch threads "
        f"{torch.get_num_threads()}"
    )
    for size in (1024, 2048):
        np_s, pil_s = measure(size, args.repeat)
        print(
            f"{size}x{size} RGB: np {1e9 * np_s:.1f} ns, pil {1e9 * pil_s:.1f} ns per output "
            f"element ({pil_s * 3 * size * size:.3f} s per image to PIL)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
