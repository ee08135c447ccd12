"""Places any Keras model's training step with `gdp.place` and trains with it.

Builds a Keras model (a small convnet or an MLP here; swap in your own),
wraps its training step (forward, loss, gradients, optimizer update) with
`gdp.place`, prints the placement report, then runs a few placed training
steps and shows the loss going down: the placed step updates the model's
own variables.

  python examples/place_keras_model.py                       # local devices
  python examples/place_keras_model.py --devices=local-cpus:2 --method=metis
  python examples/place_keras_model.py --devices=p100x4 --steps=0  # plan only
"""

import json
import sys

from absl import flags

import tf_gdp as gdp  # before TensorFlow: selects Keras 2 (TF-GNN needs it)
import tensorflow as tf  # pylint: disable=g-bad-import-order

_MODEL = flags.DEFINE_enum("model", "convnet", ["convnet", "mlp"],
                           "Which Keras model to place.")
_BATCH = flags.DEFINE_integer("batch", 32, "Batch size.", lower_bound=1)
_DEVICES = flags.DEFINE_string(
    "devices", "local", "local (this process's GPUs, else its CPU devices), "
    "local-cpus:K, or any preset / topology file (then plan only).")
_METHOD = flags.DEFINE_string("method", "gdp", "gdp or a baseline.")
_BUDGET = flags.DEFINE_float("budget_seconds", 0.0, "GDP fine-tuning time.",
                             lower_bound=0.0)
_STEPS = flags.DEFINE_integer("steps", 5, "Placed training steps to run "
                              "(0: only place).", lower_bound=0)
_SAVE = flags.DEFINE_string("save", None, "Write the placement file here.")


def build_model(kind: str) -> tf.keras.Model:
  if kind == "mlp":
    layers = [tf.keras.layers.Flatten()] + [
        tf.keras.layers.Dense(256, activation="relu") for _ in range(4)]
  else:
    layers = [tf.keras.layers.Conv2D(32, 3, activation="relu"),
              tf.keras.layers.Conv2D(64, 3, activation="relu"),
              tf.keras.layers.MaxPooling2D(),
              tf.keras.layers.Conv2D(64, 3, activation="relu"),
              tf.keras.layers.GlobalAveragePooling2D()]
  model = tf.keras.Sequential(layers + [tf.keras.layers.Dense(10)])
  model.build((None, 28, 28, 1))
  return model


def split_cpu(devices: str) -> None:
  """`local-cpus:K` needs K logical CPU devices; make them before TF starts."""
  name, _, count = devices.partition(":")
  if name == "local-cpus" and count.isdigit():
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * int(count))


def main(argv):
  del argv
  split_cpu(_DEVICES.value)
  model = build_model(_MODEL.value)
  optimizer = tf.keras.optimizers.SGD(0.05)
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

  @tf.function
  def train_step(images, labels):
    with tf.GradientTape() as tape:
      loss = loss_fn(labels, model(images, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  images = tf.random.stateless_normal([_BATCH.value, 28, 28, 1], seed=[1, 2])
  labels = tf.random.stateless_uniform([_BATCH.value], seed=[3, 4],
                                       maxval=10, dtype=tf.int32)
  placed = gdp.place(train_step, images, labels, devices=_DEVICES.value,
                     method=_METHOD.value, budget=_BUDGET.value)
  report = placed.report()
  print(json.dumps({k: report[k] for k in (
      "method", "topology", "step_time_us", "lower_bound_us", "compared",
      "ops_per_device") if k in report}, indent=1))
  if _SAVE.value:
    placed.save(_SAVE.value)
    print(f"wrote {_SAVE.value}")
  for step in range(_STEPS.value):
    print(f"step {step}: loss {float(placed(images, labels)):.4f}")


if __name__ == "__main__":
  gdp.cli.run_command(main, sys.argv)
