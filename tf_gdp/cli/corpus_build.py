"""`tf-gdp corpus build`: build and cache the corpus's training-step graphs.

Examples:
  tf-gdp corpus build                       # every graph, for p100 GPUs
  tf-gdp corpus build --select=eval --devices=v100x8
  tf-gdp corpus build --select=resnet,encoder --force

Each graph is traced from its model code, flattened, costed for the
hardware of `--devices` and written as op-graph JSON under
`$TF_GDP_HOME/corpus/<hardware>/` with a manifest (`tf-gdp corpus list`
prints it). Graphs already built at the current corpus version are kept,
so a killed build resumes. Pre-training and benchmarks name the same graphs
as `corpus:train`, `corpus:eval`, `corpus:FAMILY` in `--graphs`, and build
what is missing themselves.
"""

import sys

from absl import flags
from absl import logging as absl_logging

from tf_gdp import errors
from tf_gdp.corpus import graph_sets
from tf_gdp.corpus import store

_SELECT = flags.DEFINE_list(
    "select", ["all"], "What to build: all, train, eval, family names or "
    "variant names.")
_DEVICES = flags.DEFINE_string(
    "devices", "p100x4", "A preset or topology file whose hardware prices "
    "the ops (one cache per hardware, whatever the device count).")
_ROOT = flags.DEFINE_string("root", None, "Cache folder (default: "
                            "$TF_GDP_HOME/corpus).")
_FORCE = flags.DEFINE_bool("force", False, "Rebuild graphs already cached.")


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:
    absl_logging.set_verbosity(absl_logging.WARNING)
  if not [selection for selection in _SELECT.value if selection]:
    raise errors.InputError(
        "--select names nothing to build (all, train, eval, family or "
        "variant names)")
  variants = []
  for selection in _SELECT.value:
    for variant in graph_sets.select(f"{graph_sets.PREFIX}:{selection}"):
      if variant not in variants:
        variants.append(variant)
  built = store.ensure(variants, _DEVICES.value, root=_ROOT.value,
                       force=_FORCE.value, log=_progress)
  print(store.format_manifest(
      [dict(b.entry, name=b.variant.name) for b in built]))
  fresh = sum(b.rebuilt for b in built)
  print(f"{len(built)} graphs ({fresh} built, {len(built) - fresh} cached) "
        f"in {store.folder(_DEVICES.value, _ROOT.value)}")


def _progress(line: str) -> None:
  sys.stderr.write(line + "\n")
  sys.stderr.flush()
