"""Gantt chart of one simulated step: what every device and link did when.

One lane per device holds its ops; below them, one lane per directed link
that carried data holds its transfers. Ops are coloured by name scope (see
`names.op_scopes`); a transfer takes the colour of the op that produced the
tensor, so one can see whose data crosses which link. The `max_scopes`
scopes with the most busy time get colours and a legend entry, the rest are
grey "other". The step time is marked with a dashed line.

Graphs have 50k+ ops, so the chart never draws one artist per op: bars of
one lane and colour that touch (or are less than half a pixel apart, which
no eye can tell) are merged, and all bars go into one `PolyCollection` for
ops and one for transfers (a 60k-op GNMT-8 step with 62k transfers is
drawn and written in about half a second). Transfers are drawn at least a
pixel wide, since most are far shorter and would vanish; ops are to scale.
"""

from typing import Optional

from matplotlib import collections as mcollections
from matplotlib import colormaps
from matplotlib import patches
import numpy as np

from tf_gdp.cost import simulator
from tf_gdp.viz import names
from tf_gdp.viz import render

OTHER_COLOR = (0.78, 0.78, 0.78, 1.0)
STEP_COLOR = "crimson"
_WIDTH_IN = 15.0
_PLOT_FRACTION = 0.75  # rough share of the width the lanes get


def gantt_figure(graph, topology, placement, *, title: Optional[str] = None,
                 max_scopes: int = 12):
  """Simulates `placement` and returns its Gantt chart (a matplotlib Figure).

  Args:
    graph: the `OpGraph`.
    topology: the `Topology` the placement indexes into.
    placement: int[num_nodes] device index per op.
    title: figure title; by default graph, topology, step time, transfers.
    max_scopes: how many name scopes get their own colour.
  """
  result = simulator.simulate(graph, placement, topology,
                              record_schedule=True)
  return schedule_figure(graph, topology, result, title=title,
                         max_scopes=max_scopes)


def write_gantt_png(graph, topology, placement, path: str, *,
                    dpi: float = render.DPI, **kw) -> None:
  """Writes `gantt_figure(graph, topology, placement, **kw)` to a PNG file."""
  render.write_png(gantt_figure(graph, topology, placement, **kw), path, dpi)


def schedule_figure(graph, topology, result, *, title: Optional[str] = None,
                    max_scopes: int = 12):
  """The Gantt chart of an existing `SimResult` (needs its schedule)."""
  schedule = result.schedule
  if schedule is None:
    raise ValueError("simulate(..., record_schedule=True) first")
  d = topology.num_devices
  device_labels = names.short_device_names(topology.device_names)

  scope_names, scope_of = names.op_scopes(graph.node_names)
  op_us = schedule.op_end_us - schedule.op_start_us
  kept, kept_busy_us, slot = names.rank_scopes(scope_names, scope_of, op_us,
                                               max_scopes)
  colors = np.array(_palette(len(kept)) + [OTHER_COLOR])  # slot -1 = other

  link_key = (schedule.transfer_src_device.astype(np.int64) * d
              + schedule.transfer_dst_device)
  links, link_lane = np.unique(link_key, return_inverse=True)
  link_labels = [f"{device_labels[k // d]}->{device_labels[k % d]}"
                 for k in links]
  labels = device_labels + link_labels
  num_lanes = len(labels)

  fig = render.new_figure(_WIDTH_IN, _height_in(num_lanes))
  ax = fig.add_subplot()
  step_ms = result.step_time_us / 1e3
  x_max = step_ms * 1.02 if step_ms > 0 else 1.0
  half_pixel_ms = 0.5 * x_max / (_WIDTH_IN * render.DPI * _PLOT_FRACTION)

  ax.add_collection(_bars(
      schedule.op_device, schedule.op_start_us / 1e3,
      schedule.op_end_us / 1e3, slot, colors, 0.8, half_pixel_ms))
  # Transfers are sparse and often far shorter than a pixel: draw each at
  # least one pixel wide so that every link's traffic shows.
  transfer_start_ms = schedule.transfer_start_us / 1e3
  ax.add_collection(_bars(
      d + link_lane.reshape(-1), transfer_start_ms,
      np.maximum(schedule.transfer_end_us / 1e3,
                 transfer_start_ms + 2 * half_pixel_ms),
      slot[schedule.transfer_node], colors, 0.6, half_pixel_ms))

  for lane in range(1, num_lanes, 2):
    ax.axhspan(lane - 0.5, lane + 0.5, color="0.96", zorder=0, lw=0)
  if link_labels:
    ax.axhline(d - 0.5, color="0.4", lw=0.8)
  ax.axvline(step_ms, color=STEP_COLOR, ls="--", lw=1.2)
  ax.text(step_ms, 1.0, f"step {step_ms:.3g} ms ", color=STEP_COLOR,
          transform=ax.get_xaxis_transform(), ha="right", va="bottom",
          fontsize=9)

  ax.set_xlim(-0.005 * x_max, x_max)  # bars at t = 0 clear the spine
  ax.set_ylim(num_lanes - 0.5, -0.5)
  ax.set_yticks(np.arange(num_lanes), labels,
                fontsize=9 if num_lanes <= 24 else 7)
  ax.set_xlabel("time (ms)")
  ax.grid(axis="x", color="0.85", lw=0.6)
  ax.set_axisbelow(True)
  ax.set_title(title if title is not None else _default_title(
      graph, topology, result), fontsize=11)
  _legend(ax, kept, kept_busy_us, colors, has_other=bool(np.any(slot < 0)))
  return fig


def _bars(lane, start, end, slot, colors, height, merge_gap):
  """One PolyCollection of rectangles, runs of one lane and colour merged."""
  lane = np.asarray(lane, np.int64)
  keep = end > start  # zero-time ops (Const, NoOp) are invisible anyway
  lane, start, end, slot = lane[keep], start[keep], end[keep], slot[keep]
  order = np.lexsort((start, lane))
  lane, start, end, slot = lane[order], start[order], end[order], slot[order]
  new_run = np.ones(lane.shape[0], np.bool_)
  # Items on one lane never overlap (a device runs one op, a link carries one
  # transfer at a time), so the previous item's end is the run's end.
  new_run[1:] = ((lane[1:] != lane[:-1]) | (slot[1:] != slot[:-1])
                 | (start[1:] - end[:-1] > merge_gap))
  first = np.flatnonzero(new_run)
  x0 = start[first]
  x1 = np.maximum.reduceat(end, first) if first.size else end[:0]
  y = lane[first].astype(np.float64)
  low, high = y - height / 2, y + height / 2
  vertices = np.stack([np.stack([x0, low], -1), np.stack([x0, high], -1),
                       np.stack([x1, high], -1), np.stack([x1, low], -1)],
                      axis=1)
  bars = mcollections.PolyCollection(
      vertices, facecolors=colors[slot[first]], edgecolors="none",
      linewidths=0.0)
  bars.set_in_layout(False)
  return bars


def _palette(count: int) -> list:
  """Distinct non-grey colours: tab10, then tab20's light shades, then hsv."""
  tab10 = [c for i, c in enumerate(colormaps["tab10"].colors) if i != 7]
  light = [c for i, c in enumerate(colormaps["tab20"].colors)
           if i % 2 == 1 and i != 15]
  base = [tuple(c) + (1.0,) for c in tab10 + light]
  extra = max(count - len(base), 0)
  hsv = colormaps["hsv"]
  base += [tuple(hsv(k / max(extra, 1))) for k in range(extra)]
  return base[:count]


def _legend(ax, kept, kept_busy_us, colors, has_other: bool):
  handles = [patches.Patch(facecolor=colors[k],
                           label=f"{scope}  {busy / 1e3:.3g} ms")
             for k, (scope, busy) in enumerate(zip(kept, kept_busy_us))]
  if has_other:
    handles.append(patches.Patch(facecolor=OTHER_COLOR, label="other"))
  if handles:
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0),
              borderaxespad=0.0, fontsize=8, title="name scope (op time)",
              title_fontsize=8, frameon=False)


def _default_title(graph, topology, result) -> str:
  moved_mb = result.transfer_bytes / 1e6
  title = (f"{names.graph_label(graph)} on {topology.name}: simulated "
           f"step {result.step_time_us / 1e3:.3g} ms, {result.num_transfers} "
           f"transfers ({moved_mb:.3g} MB)")
  if not result.valid:
    reason = result.reason or ""
    title += "\nINVALID: " + (reason[:120] + "..." if len(reason) > 120
                              else reason)
  return title


def _height_in(num_lanes: int) -> float:
  """Lanes stay readable: 0.38 in each up to 20, then 0.22 in each."""
  return 1.6 + 0.38 * min(num_lanes, 20) + 0.22 * max(num_lanes - 20, 0)
