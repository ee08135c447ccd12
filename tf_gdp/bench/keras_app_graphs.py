"""Training steps of Keras applications, for the real-runtime checks.

Real model code the zoo and the tests do not use: `tf_keras.applications`
networks (random weights, 10 classes) at small images, with a softmax
cross-entropy loss and SGD updates (`corpus.training_steps`). Each builder
returns a step function for `extract.from_function`; `BUILDERS` maps names to
them. Sizes are chosen so that one step takes tens of milliseconds on one
pinned core: long enough that op costs, not the session's own overhead,
decide the step time, short enough for dozens of timed placements.
"""

from tf_gdp.corpus import training_steps

# name -> (application class, keyword arguments, image size, batch)
_APPLICATIONS = {
    "keras_mobilenet_v2": ("MobileNetV2", {"alpha": 0.5}, 96, 4),
    "keras_resnet50": ("ResNet50", {}, 64, 2),
    "keras_densenet121": ("DenseNet121", {}, 64, 2),
}


def _builder(name: str):
  application, kwargs, image_size, batch = _APPLICATIONS[name]

  def build():
    return training_steps.keras_application(
        application, image_size=image_size, batch=batch, **kwargs)

  build.__doc__ = (f"{application} training step, {image_size}x{image_size} "
                   f"images, batch {batch}.")
  return build


BUILDERS = {name: _builder(name) for name in _APPLICATIONS}


def describe(name: str) -> str:
  """One line: which application, at which size."""
  application, kwargs, image_size, batch = _APPLICATIONS[name]
  return training_steps.describe_application(
      application, image_size=image_size, batch=batch, **kwargs)
