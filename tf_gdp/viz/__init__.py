"""Pictures of placements: Gantt charts and device summaries of a step.

    from tf_gdp.viz import gantt
    gantt.write_gantt_png(graph, topology, placement, "step.png")

Everything is drawn from the simulator's schedule (`cost.simulator`), off
screen (Agg), and written atomically. Needs matplotlib (an install
requirement of tf-gdp).
"""

from grappler_bridge import package_api as _package_api

try:
  import matplotlib  # pylint: disable=unused-import
except ImportError as e:  # pragma: no cover - matplotlib is installed with us
  raise ImportError(
      "tf_gdp.viz needs matplotlib: pip install 'tf-gdp' (or matplotlib>=3.8)"
  ) from e

# pylint: disable=g-import-not-at-top,wrong-import-position
from tf_gdp.viz.gantt import gantt_figure
from tf_gdp.viz.gantt import schedule_figure
from tf_gdp.viz.gantt import write_gantt_png
from tf_gdp.viz.summary_chart import result_figure
from tf_gdp.viz.summary_chart import summary_figure
from tf_gdp.viz.summary_chart import write_device_summary_png
from tf_gdp.viz.tensorboard import log_placement_images

__all__ = [
    "gantt_figure",
    "log_placement_images",
    "result_figure",
    "schedule_figure",
    "summary_figure",
    "write_device_summary_png",
    "write_gantt_png",
]

_package_api.install(
    globals(),
    modules=("gantt", "summary_chart", "tensorboard"))
