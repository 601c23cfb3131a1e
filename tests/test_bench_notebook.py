"""examples/benchmark_collectives.ipynb runs top to bottom on CPU (4 local gloo ranks)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "benchmark_collectives.ipynb"


@pytest.mark.multiprocess
def test_notebook_runs_and_shows_the_table_the_plot_and_the_fit(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    kinds = {k for o in outputs for k in o.get("data", {})}
    assert "text/markdown" in kinds  # the table
    assert "image/png" in kinds  # the plot
    table = next(
        o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})
    )
    # 5 ops x 5 sizes (4 KiB .. 1 MiB, x4) = 25 rows, plus 2 header lines
    assert len(table.strip().splitlines()) == 27
    printed = "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "ring"):
        assert f"{op} " in printed and "busbw" in printed
