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
from grappler_bridge import runnable  # pylint: disable=g-import-not-at-top


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


def check_saved_model_source(extracted) -> None:
  """InputError unless `extracted` can be written back as a SavedModel: it
  was loaded from one, and its variables are resource variables."""
  source = extracted.structured_outputs
  if not (isinstance(source, tuple) and len(source) == 2):
    raise errors.InputError("only a graph loaded from a SavedModel can be "
                            "written back as one")
  held = sorted(node.name for node in extracted.graph_def.node
                if node.op in runnable.REF_VARIABLE_OPS)
  if held:
    raise errors.InputError(
        f"the SavedModel holds TF1 reference variables ({len(held)}, e.g. "
        f"{held[0]!r}), which a placed SavedModel cannot carry: re-save it "
        "after tf.compat.v1.enable_resource_variables()")


def save_placed_saved_model(extracted, device_map: Mapping[str, str],
                            directory: str,
                            signature: str = "serving_default") -> None:
  """Saves into `directory` a SavedModel whose `signature` runs the placement.

  The signature calls the flattened graph with every op's device field set
  (the same graph `rewrite.placed_function` runs) on the loaded model's own
  variables, which are saved with it; ops on a variable's handle keep no
  device and follow the variable. Signature inputs keep the source
  signature's names (args_0, ... where it has none).

  Raises:
    InputError: `extracted` was not loaded from a SavedModel, or its
      variables are TF1 reference variables.
  """
  check_saved_model_source(extracted)
  model, structure = extracted.structured_outputs
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
  names = _input_names(model, signature, len(extracted.arg_names))
  specs = [tf.TensorSpec(t.shape, t.dtype, name=name) for t, name in
           zip(placed.inputs[:len(extracted.arg_names)], names)]
  module = tf.Module()
  module.model = model  # tracks the variables the placed graph reads

  @tf.function(input_signature=specs)
  def serve(*args):
    outputs = placed(*args)
    return tf.nest.pack_sequence_as(structure, outputs)

  module.serve = serve
  tf.saved_model.save(module, directory,
                      signatures={signature: serve.get_concrete_function()})


def _input_names(model, signature: str, count: int) -> list:
  """The source signature's input names, in the flat graph's argument order
  (a signature's inputs are keywords, flattened in sorted order)."""
  fallback = [f"args_{i}" for i in range(count)]
  source = getattr(model, "signatures", {}).get(signature)
  if source is None:
    return fallback
  args, kwargs = source.structured_input_signature
  names = [getattr(spec, "name", None) for spec in tf.nest.flatten(args)]
  names += sorted(kwargs) if all(
      isinstance(v, tf.TensorSpec) for v in kwargs.values()) else [None] * len(
          tf.nest.flatten(kwargs))
  if len(names) != count or not all(names) or len(set(names)) != count:
    return fallback
  return names
