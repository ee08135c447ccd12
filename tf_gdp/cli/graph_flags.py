"""Flags that the commands reading graphs define the same way."""

from absl import flags


def define_signature(module_name: str) -> flags.FlagHolder:
  """`--signature=NAME`, listed under the command `module_name`'s --help."""
  return flags.DEFINE_string(
      "signature", None, "SavedModel signature to read (default: "
      "serving_default if the SavedModel has it, else its only signature).",
      module_name=module_name)


def define_graph(module_name: str) -> flags.FlagHolder:
  """`--graph=SPEC`, one graph of any kind, required."""
  return flags.DEFINE_string(
      "graph", None, "The graph: a zoo model with knobs ('gnmt8', "
      "'rnnlm2:batch=8'), a graph file (.json/.pb/.pbtxt, SavedModel dir) or "
      "a generated graph ('layered:N', 'cells:N').", required=True,
      module_name=module_name)


def define_profile(module_name: str) -> flags.FlagHolder:
  """`--profile`: price TF graphs by a profile on devices that are here."""
  return flags.DEFINE_bool(
      "profile", True, "When the devices are here (local-cpus:K, "
      "cpu-workers:K), price a TensorFlow graph's ops by a profile on them (a "
      "few steps, cached; every method alike); --noprofile keeps the roofline "
      "costs.", module_name=module_name)


def define_input_shapes(module_name: str) -> flags.FlagHolder:
  """`--input_shapes=NAME:DIMS,...`: shapes a graph file leaves unknown."""
  return flags.DEFINE_string(
      "input_shapes", None, "Shapes of a graph file's or SavedModel's inputs "
      "where it leaves them unknown, e.g. 'x:32x128,mask:32x128' (unknown "
      "dimensions are otherwise priced as 1). The placed graph written with "
      "--write_graph keeps these shapes.", module_name=module_name)
