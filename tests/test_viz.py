"""Placement pictures: PNG files, lanes, scope colours, TensorBoard images."""

import glob
import os

from matplotlib import image as mimage
import numpy as np
import pytest

from tf_gdp.cost import topology
from tf_gdp.graph import op_graph
from tf_gdp.viz import gantt
from tf_gdp.viz import names
from tf_gdp.viz import summary_chart

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GIB = 1 << 30


def _graph():
  """Two scopes: `encoder` (n0, n1) feeds `decoder` (d0, d1) over a fork."""
  node_names = ["encoder/a", "encoder/b", "decoder/a", "decoder/b"]
  edges = [(0, 1, 4000), (0, 2, 8000), (1, 3, 4000), (2, 3, 4000)]
  return op_graph.OpGraph.build(
      name="tiny", node_names=node_names, op_types=["MatMul"] * 4,
      costs={"GPU": [3.0, 5.0, 4.0, 2.0]}, output_bytes=[8000, 4000, 4000, 0],
      memory_bytes=[1000, 0, 2000, 0], edge_src=[e[0] for e in edges],
      edge_dst=[e[1] for e in edges], edge_bytes=[e[2] for e in edges],
      fetches=["decoder/b"])


def _topology():
  devices = [topology.Device(f"/job:localhost/replica:0/task:0/device:GPU:{i}",
                             "GPU", GIB) for i in range(2)]
  return topology.custom("two-gpus", devices, np.full((2, 2), 1.0),
                         np.full((2, 2), 1.0))


_PLACEMENT = [0, 0, 1, 0]  # encoder/a -> decoder/a and back cross the link


def _assert_png(path, fig, dpi):
  with open(path, "rb") as f:
    assert f.read(8) == _PNG_MAGIC
  pixels = mimage.imread(path)
  width, height = fig.get_size_inches() * dpi
  assert pixels.shape[:2] == (round(height), round(width))
  assert not [p for p in os.listdir(os.path.dirname(path))
              if p.startswith(".tmp-")]


def test_gantt_png_is_a_readable_image(tmp_path):
  path = str(tmp_path / "out" / "gantt.png")
  gantt.write_gantt_png(_graph(), _topology(), _PLACEMENT, path, dpi=50)
  _assert_png(path, gantt.gantt_figure(_graph(), _topology(), _PLACEMENT), 50)


def test_gantt_has_a_lane_per_device_and_per_used_link():
  fig = gantt.gantt_figure(_graph(), _topology(), _PLACEMENT)
  labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
  assert labels == ["GPU:0", "GPU:1", "GPU:0->GPU:1", "GPU:1->GPU:0"]


def test_gantt_colours_ops_by_scope_with_a_legend_entry_each():
  fig = gantt.gantt_figure(_graph(), _topology(), _PLACEMENT)
  ax = fig.axes[0]
  entries = [t.get_text().split()[0] for t in ax.get_legend().get_texts()]
  assert entries == ["encoder", "decoder"]  # by busy time: 8 us, then 6 us
  ops, transfers = ax.collections
  # Ops touching on one lane with one colour merge: encoder/a+b on GPU:0,
  # decoder/a on GPU:1, decoder/b on GPU:0 -> three bars in two colours.
  assert len(ops.get_paths()) == 3
  assert len({tuple(c) for c in ops.get_facecolors()}) == 2
  assert len(transfers.get_paths()) == 2


def test_gantt_marks_the_step_time_in_ms():
  fig = gantt.gantt_figure(_graph(), _topology(), _PLACEMENT)
  ax = fig.axes[0]
  # encoder/a 0-3, transfer 3-12 (1 us + 8000 B at 1 GB/s), decoder/a
  # 12-16, transfer back 16-21, decoder/b 21-23 us.
  step_line = [line for line in ax.get_lines()
               if line.get_color() == gantt.STEP_COLOR]
  assert step_line[0].get_xdata()[0] == pytest.approx(0.023)
  assert "0.023 ms" in ax.get_title()


def test_gantt_puts_small_scopes_in_other():
  fig = gantt.gantt_figure(_graph(), _topology(), _PLACEMENT, max_scopes=1,
                           title="custom")
  ax = fig.axes[0]
  entries = [t.get_text().split()[0] for t in ax.get_legend().get_texts()]
  assert entries == ["encoder", "other"]
  assert ax.get_title() == "custom"


def test_short_device_names_keep_only_what_differs():
  assert names.short_device_names(
      ["/job:worker/replica:0/task:0/device:CPU:0",
       "/job:worker/replica:0/task:1/device:CPU:0"]) == [
           "task:0/CPU:0", "task:1/CPU:0"]
  assert names.short_device_names(["/device:GPU:0", "/device:CPU:0"]) == [
      "GPU:0", "CPU:0"]
  assert names.short_device_names(["weird", "/gpu:0"]) == ["weird", "/gpu:0"]


def test_scopes_split_wrappers_and_group_unscoped_ops():
  scope_names, scope_of = names.op_scopes(
      ["encoder/x", "gradient_tape/encoder/x", "gradient_tape/y", "AddN_3",
       "encoder/layer_1/z"])
  assert [scope_names[k] for k in scope_of] == [
      "encoder", "gradient_tape/encoder", "gradient_tape", names.NO_SCOPE,
      "encoder"]


def test_device_summary_png(tmp_path):
  path = str(tmp_path / "summary.png")
  summary_chart.write_device_summary_png(_graph(), _topology(), _PLACEMENT,
                                         path, dpi=40)
  fig = summary_chart.summary_figure(_graph(), _topology(), _PLACEMENT)
  _assert_png(path, fig, 40)
  time_ax, memory_ax = fig.axes
  assert [t.get_text() for t in time_ax.get_xticklabels()] == ["GPU:0", "GPU:1"]
  busy = [bar.get_height() for bar in time_ax.patches]
  assert busy == pytest.approx([0.010, 0.004])  # ms: 3 + 5 + 2, then 4 us
  assert len(memory_ax.patches) == 2


def test_tensorboard_images_are_written(tmp_path):
  tf = pytest.importorskip("tensorflow")
  from tf_gdp.viz import tensorboard  # pylint: disable=g-import-not-at-top
  logdir = str(tmp_path / "logs")
  writer = tf.summary.create_file_writer(logdir)
  with writer.as_default():
    assert tensorboard.log_placement_images(7, _graph(), _topology(),
                                            _PLACEMENT)
  writer.close()
  assert not tensorboard.log_placement_images(8, _graph(), _topology(),
                                              _PLACEMENT)  # no writer: no-op
  images = {}
  for path in glob.glob(os.path.join(logdir, "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        images[value.tag] = (event.step, value)
  assert sorted(images) == ["placement/devices", "placement/gantt"]
  step, value = images["placement/gantt"]
  assert step == 7
  assert value.metadata.plugin_data.plugin_name == "images"
  width, height, png = tf.make_ndarray(value.tensor)  # images plugin layout
  assert png.startswith(_PNG_MAGIC)
  decoded = tf.io.decode_png(png).numpy()
  assert decoded.shape[:2] == (int(height), int(width))


def test_public_api_is_deliberate():
  from tf_gdp import viz  # pylint: disable=g-import-not-at-top
  assert viz.__all__ == [
      "gantt_figure", "log_placement_images", "result_figure",
      "schedule_figure", "summary_figure", "write_device_summary_png",
      "write_gantt_png"]
