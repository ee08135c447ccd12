"""Placement pictures in TensorBoard, for training runs to log as they go.

TensorFlow is imported inside the function: `tf_gdp.viz` stays cheap to
import for the CLI and for tools that only write PNG files.
"""

from tf_gdp.viz import gantt
from tf_gdp.viz import render
from tf_gdp.viz import summary_chart


def log_placement_images(step: int, graph, topology, placement,
                         name: str = "placement") -> bool:
  """Writes the Gantt chart and the device summary as `tf.summary` images.

  The images go to the current default summary writer under the tags
  `{name}/gantt` and `{name}/devices`. Nothing is rendered when no writer is
  active (or summaries are off), so callers need not check.

  Returns:
    Whether the images were written.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if not tf.summary.should_record_summaries():
    return False
  written = True
  for tag, fig in (
      ("gantt", gantt.gantt_figure(graph, topology, placement)),
      ("devices", summary_chart.summary_figure(graph, topology, placement))):
    image = tf.io.decode_png(render.png_bytes(fig), channels=4)
    written &= bool(tf.summary.image(f"{name}/{tag}", image[tf.newaxis],
                                     step=step))
  return written
