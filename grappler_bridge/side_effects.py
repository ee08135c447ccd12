"""Ops that reach outside the step, and the check that refuses to run them.

Profiling and measuring run a graph's ops, and a graph read from a file or a
SavedModel is someone's code: a `WriteFile` writes wherever its author chose,
a `PyFunc` calls back into Python, a reader or a dataset opens files, an RPC
op talks to the network. Placing only simulates and never runs anything; the
commands and functions that run the graph call `check` first, which refuses
a graph holding any of these ops (in its nodes or in the functions they call)
with one line naming them, unless the caller allows side effects.

`OPS` is built from TensorFlow's op registry: every registered op whose name
matches one of `_PATTERNS`, plus `_KNOWN` (in case a TF build lacks some of
them), minus `_ORDINARY`, stateful ops that only touch the step's own state
(variables, random state, tensor arrays) and must never be refused.

Printing is not on the list: `Print` and `PrintV2` write to this process's
standard streams or log, which changes nothing outside the run. A `PrintV2`
whose `output_stream` is `file://...` writes a file and is refused.
"""

import re
from typing import Iterable, List, Tuple

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

from tensorflow.core.framework import op_def_pb2  # pylint: disable=g-import-not-at-top
from tensorflow.python.client import pywrap_tf_session  # pylint: disable=g-import-not-at-top

from grappler_bridge import errors  # pylint: disable=g-import-not-at-top

# Op names (whole-name regular expressions) that reach outside the step.
_PATTERNS = (
    # files: read, write, list, checkpoints, memory-mapped constants
    r"(Read|Write)File", r"MatchingFiles\w*", r"FileSystemSetConfiguration",
    r"(DTensor)?(Save|Restore)(V2|Slices?)?", r"MergeV2Checkpoints",
    r"ImmutableConst", r"DumpTensor", r"RecordInput",
    r"LoadAndRemapMatrix", r"GenerateVocabRemapping",
    r"InitializeTableFromTextFile(V2)?", r"CalibrationStatisticsSaver",
    # summaries and events written to disk or a database
    r"Write\w*Summary", r"\w*Summary(File|Db)?Writer", r"ImportEvent",
    # Python callbacks
    r"(Eager)?PyFunc(Stateless)?",
    # TF1 file readers
    r"(TFRecord|FixedLengthRecord|TextLine|WholeFile|LMDB)Reader(V2)?",
    r"ReaderRead(UpTo)?(V2)?",
    # tf.data: datasets that read or write files, or talk to a service
    r"(Experimental)?(TFRecord|FixedLengthRecord|TextLine|CSV|Sql|LMDB)"
    r"Dataset(V\d)?",
    r"\w*Snapshot\w*(Dataset|Reader)(V\d)?", r"(Save|Load)Dataset(V\d)?",
    r"(Experimental)?DatasetToTFRecord", r"DistributedSave",
    r"CacheDataset(V\d)?", r"DataServiceDataset(V\d)?",
    r"RegisterDataset(V\d)?",
    # debugger ops that send tensors to files or gRPC endpoints
    r"Debug(Identity|NanCount|NumericSummary)(V\d)?",
    # network
    r"(Delete)?Rpc\w*",
)
# Always on the list, whatever the registry holds.
_KNOWN = frozenset({
    "WriteFile", "ReadFile", "MatchingFiles", "SaveV2", "RestoreV2",
    "MergeV2Checkpoints", "Save", "SaveSlices", "Restore", "RestoreSlice",
    "WriteSummary", "WriteScalarSummary", "WriteHistogramSummary",
    "WriteImageSummary", "WriteAudioSummary", "WriteGraphSummary",
    "WriteRawProtoSummary", "CreateSummaryFileWriter", "CreateSummaryDbWriter",
    "FlushSummaryWriter", "CloseSummaryWriter", "PyFunc", "PyFuncStateless",
    "EagerPyFunc", "TFRecordDataset", "TextLineDataset", "DebugIdentity",
    "DebugIdentityV2",
})
# Stateful, but only within the step: never refused.
_ORDINARY = frozenset({
    "ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp",
    "AssignSubVariableOp", "VarHandleOp", "VariableV2", "Assign",
    "ResourceApplyAdam", "ResourceApplyGradientDescent", "RandomUniform",
    "RandomStandardNormal", "StatelessRandomUniformV2", "TensorArrayReadV3",
    "TensorArrayWriteV3", "Snapshot", "DebugGradientIdentity",
    "DebugGradientRefIdentity", "ScalarSummary", "HistogramSummary",
    "MergeSummary", "Print", "PrintV2",
})
# Names of at most this many offending ops go in the refusal line.
_NAMED = 3


def _registered_ops() -> List[str]:
  """Every op name TensorFlow's registry holds in this process."""
  buffer = pywrap_tf_session.TF_GetAllOpList()
  try:
    ops = op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetBuffer(buffer))
  finally:
    pywrap_tf_session.TF_DeleteBuffer(buffer)
  return [op.name for op in ops.op]


def _build(names: Iterable[str]) -> frozenset:
  pattern = re.compile("|".join(f"(?:{p})" for p in _PATTERNS))
  matched = {name for name in names if pattern.fullmatch(name)}
  return frozenset((matched | _KNOWN) - _ORDINARY)


OPS = _build(_registered_ops())


def _writes_a_file(node) -> bool:
  """A PrintV2 that prints to `file://...` rather than a stream or the log."""
  if node.op != "PrintV2" or "output_stream" not in node.attr:
    return False
  return node.attr["output_stream"].s.decode("utf-8", "replace").startswith(
      "file://")


def find(graph_def) -> List[Tuple[str, str]]:
  """(node name, op) of every op of `graph_def` that reaches outside the step.

  The graph's own nodes first, then the nodes of the library functions they
  call (directly, through a function-valued attribute, or from another
  called function); functions nobody calls (a SavedModel's save and restore
  functions) do not count.
  """
  functions = {f.signature.name: f for f in graph_def.library.function}
  found, seen, pending = [], set(), []

  def visit(nodes, prefix):
    for node in nodes:
      if node.op in OPS or _writes_a_file(node):
        found.append((prefix + node.name, node.op))
      called = [node.op] + [a.func.name for a in node.attr.values()
                            if a.HasField("func")]
      for attr in node.attr.values():
        if attr.HasField("list"):
          called += [f.name for f in attr.list.func]
      for name in called:
        if name in functions and name not in seen:
          seen.add(name)
          pending.append(name)

  visit(graph_def.node, "")
  while pending:
    name = pending.pop()
    visit(functions[name].node_def, f"{name}/")
  return found


def check(graph_def, *, allow_side_effects: bool = False,
          what: str = "the graph") -> None:
  """Raises InputError naming the ops of `find`, unless side effects are allowed.

  Call it before anything of the graph runs (profiling, measuring).
  """
  if allow_side_effects:
    return
  found = find(graph_def)
  if not found:
    return
  named = ", ".join(f"{op} {name!r}" for name, op in found[:_NAMED])
  more = f" and {len(found) - _NAMED} more" if len(found) > _NAMED else ""
  raise errors.InputError(
      f"{what} has ops that reach outside the step (files, Python "
      f"callbacks, the network): {named}{more}; not running it: pass "
      "--allow_side_effects (allow_side_effects=True in Python) to run them "
      "anyway")
