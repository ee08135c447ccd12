"""A placed graph handed back to TensorFlow: a MetaGraphDef or a SavedModel.

A placement is worth most where the user's own tools run it, so the placed
flat graph can leave tf-gdp as a MetaGraphDef whose device fields are set,
or, for a graph that came from a SavedModel, as a SavedModel whose signature
runs the placed graph on the model's own variables.
"""

from typing import Mapping

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top

from grappler_bridge import constraints  # pylint: disable=g-import-not-at-top
from grappler_bridge import errors  # pylint: disable=g-import-not-at-top
from grappler_bridge import rewrite  # pylint: disable=g-import-not-at-top


def placed_meta_graph(extracted, device_map: Mapping[str, str]):
  """A copy of the flat MetaGraphDef with every placed op's device field set.

  Ops of `device_map` that the graph does not have are ignored.
  """
  meta = type(extracted.meta_graph)()
  meta.CopyFrom(extracted.meta_graph)
  names = {node.name for node in meta.graph_def.node}
  placed = rewrite.apply_placement(
      meta.graph_def, {op: d for op, d in device_map.items() if op in names})
  meta.graph_def.CopyFrom(placed)
  return meta


def save_placed_saved_model(extracted, device_map: Mapping[str, str],
                            directory: str,
                            signature: str = "serving_default") -> None:
  """Saves into `directory` a SavedModel whose `signature` runs the placement.

  The signature calls the flattened graph with every op's device field set
  (the same graph `rewrite.placed_function` runs) on the loaded model's own
  variables, which are saved with it; ops on a variable's handle keep no
  device and follow the variable. Signature inputs are named args_0, ...

  Raises:
    InputError: `extracted` was not loaded from a SavedModel.
  """
  source = extracted.structured_outputs
  if not (isinstance(source, tuple) and len(source) == 2):
    raise errors.InputError("only a graph loaded from a SavedModel can be "
                            "written back as one")
  model, structure = source
  # Ops on a variable's handle go wherever the variable is restored at load
  # time (TF colocates them): leave their device fields empty.
  groups = {name: group for group in
            constraints.colocation_groups(extracted.graph_def)
            for name in group}
  follow = set()
  for name in extracted.capture_names:
    follow.update(groups.get(name, [name]))
  device_map = {op: d for op, d in device_map.items() if op not in follow}
  placed = rewrite.placed_function(extracted, device_map, check_devices=False)
  specs = [tf.TensorSpec(t.shape, t.dtype)
           for t in placed.inputs[:len(extracted.arg_names)]]
  module = tf.Module()
  module.model = model  # tracks the variables the placed graph reads

  @tf.function(input_signature=specs)
  def serve(*args):
    outputs = placed(*args)
    return tf.nest.pack_sequence_as(structure, outputs)

  module.serve = serve
  tf.saved_model.save(module, directory,
                      signatures={signature: serve.get_concrete_function()})
