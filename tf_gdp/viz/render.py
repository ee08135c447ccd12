"""Off-screen figures and atomic PNG files.

Charts are drawn on `matplotlib.figure.Figure` with an Agg canvas, never
through pyplot: no display is needed, no global pyplot state is touched, and
figures are freed as soon as they are dropped.
"""

import io

from matplotlib.backends import backend_agg
from matplotlib import figure as figure_lib

from tf_gdp import fileio

DPI = 110


def new_figure(width_in: float, height_in: float) -> figure_lib.Figure:
  """A constrained-layout figure on its own Agg canvas."""
  fig = figure_lib.Figure(figsize=(width_in, height_in), dpi=DPI,
                          layout="constrained")
  backend_agg.FigureCanvasAgg(fig)
  return fig


def png_bytes(fig: figure_lib.Figure, dpi: float = DPI) -> bytes:
  """The figure rendered as PNG; its size is figsize x dpi pixels."""
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=dpi)
  return buffer.getvalue()


def write_png(fig: figure_lib.Figure, path: str, dpi: float = DPI) -> None:
  """Renders first, then writes atomically: a reader never sees half a PNG."""
  fileio.write_atomically(path, png_bytes(fig, dpi))
