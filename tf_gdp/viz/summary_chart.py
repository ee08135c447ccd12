"""Per-device summary of one simulated step: time use and memory use.

Two bar charts side by side. Left: each device's busy time against the step
time (the dashed line), labelled with its utilization; a placement that
leaves devices idle or piles work on one shows at a glance. Right: each
device's peak memory as a share of its capacity (labelled "peak / capacity
GiB"), red past 100% (the placement does not fit). Shares rather than bytes,
because a host CPU with 256 GiB beside 16 GiB GPUs would flatten the GPU
bars.
"""

from typing import Optional

import numpy as np

from tf_gdp.cost import simulator
from tf_gdp.viz import names
from tf_gdp.viz import render

_GIB = float(1 << 30)
BUSY_COLOR = "tab:blue"
MEMORY_COLOR = "tab:green"
OVER_COLOR = "tab:red"


def summary_figure(graph, topology, placement, *,
                   title: Optional[str] = None):
  """Simulates `placement` and returns the two-panel summary Figure."""
  result = simulator.simulate(graph, placement, topology)
  return result_figure(graph, topology, result, title=title)


def write_device_summary_png(graph, topology, placement, path: str, *,
                             dpi: float = render.DPI, **kw) -> None:
  """Writes `summary_figure(graph, topology, placement, **kw)` as a PNG."""
  render.write_png(summary_figure(graph, topology, placement, **kw), path,
                   dpi)


def result_figure(graph, topology, result, *, title: Optional[str] = None):
  """The summary of an existing `SimResult`."""
  labels = names.short_device_names(topology.device_names)
  d = len(labels)
  fig = render.new_figure(max(9.0, 3.0 + 1.1 * d), 4.2)
  time_ax, memory_ax = fig.subplots(1, 2)
  x = np.arange(d)

  step_ms = result.step_time_us / 1e3
  busy_ms = np.asarray(result.device_busy_us, np.float64) / 1e3
  time_ax.bar(x, busy_ms, color=BUSY_COLOR, width=0.7)
  time_ax.axhline(step_ms, color="crimson", ls="--", lw=1.2,
                  label=f"step time {step_ms:.3g} ms")
  for i, busy in enumerate(busy_ms):
    share = busy / step_ms if step_ms > 0 else 0.0
    time_ax.annotate(f"{share:.0%}", (i, busy), xytext=(0, 2),
                     textcoords="offset points", ha="center", va="bottom",
                     fontsize=8)
  time_ax.set_ylim(0.0, max(step_ms, float(busy_ms.max(initial=0.0)), 1e-9)
                   * 1.15)
  time_ax.set_ylabel("busy time (ms)")
  time_ax.set_title("device busy time vs step time (utilization)",
                    fontsize=10)
  time_ax.legend(loc="best", fontsize=8, framealpha=0.8)

  peak = np.asarray(result.peak_memory_bytes, np.float64)
  capacity = topology.memory_bytes.astype(np.float64)
  share = peak / capacity
  memory_ax.bar(x, share * 100.0, width=0.7,
                color=[OVER_COLOR if s > 1.0 else MEMORY_COLOR for s in share])
  memory_ax.axhline(100.0, color="0.3", ls="--", lw=1.0, label="capacity")
  for i in range(d):
    memory_ax.annotate(f"{peak[i] / _GIB:.3g} / {capacity[i] / _GIB:.3g} GiB",
                       (i, share[i] * 100.0), xytext=(0, 2),
                       textcoords="offset points", ha="center", va="bottom",
                       fontsize=7)
  memory_ax.set_ylim(0.0, max(100.0, float(share.max(initial=0.0)) * 100.0)
                     * 1.15)
  memory_ax.set_ylabel("peak memory (% of capacity)")
  memory_ax.set_title("peak memory vs capacity", fontsize=10)
  memory_ax.legend(loc="best", fontsize=8, framealpha=0.8)

  for ax in (time_ax, memory_ax):
    ax.set_xticks(x, labels, fontsize=8, rotation=30 if d > 6 else 0)
    ax.grid(axis="y", color="0.88", lw=0.6)
    ax.set_axisbelow(True)
  if title is None:
    title = (f"{names.graph_label(graph)} on {topology.name}: simulated "
             f"step {step_ms:.3g} ms")
    if not result.valid:
      title += " (INVALID)"
  fig.suptitle(title, fontsize=11)
  return fig
