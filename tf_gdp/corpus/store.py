"""Builds corpus graphs on demand and caches them as op-graph JSON.

Tracing a Keras application and costing it takes seconds to a minute; a
pre-training run reads dozens of graphs many times. So each variant is
built once per hardware (the op costs depend on which spec prices each
device kind, not on how many devices there are: `p100x2` and `p100x8` share
a cache) under `$TF_GDP_HOME/corpus/<hardware>/<variant>.json`, written
atomically, with a manifest of what each graph is. A file whose corpus
version or variant arguments differ from the table's is rebuilt. Several
processes may build into one cache at once: each merges its own entries
into the manifest under a lock, so none drops another's.
"""

import dataclasses
import fcntl
import json
import os
import time
from typing import Callable, List, Optional, Sequence

import numpy as np

from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp.corpus import families
from tf_gdp.cost import presets
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import json_io
from tf_gdp.graph import op_graph

# Bumped when a builder changes what it builds, or the bridge how it prices
# it: every cached graph rebuilds. 2: ops no fetch needs are free.
CORPUS_VERSION = 2
MANIFEST = "manifest.json"
GIB = float(1 << 30)


def default_root() -> str:
  home = os.environ.get("TF_GDP_HOME", os.path.expanduser("~/.cache/tf_gdp"))
  return os.path.join(home, "corpus")


def hardware_label(devices: str) -> str:
  """The cache folder of a topology: which spec prices each device kind."""
  hardware = topology_lib.get(devices).hardware
  if not hardware:
    raise errors.InputError(f"topology {devices!r} has no 'hardware' field: "
                            "the corpus cannot price its ops")
  return "-".join(f"{kind}_{spec}" for kind, spec in sorted(hardware.items()))


def folder(devices: str, root: Optional[str] = None) -> str:
  """Where the graphs costed for `devices`' hardware are cached."""
  return os.path.join(root or default_root(), hardware_label(devices))


def graph_path(variant: families.Variant, devices: str,
               root: Optional[str] = None) -> str:
  return os.path.join(folder(devices, root), f"{variant.name}.json")


@dataclasses.dataclass
class Built:
  """One variant's cached graph and what the manifest says of it."""
  variant: families.Variant
  path: str
  rebuilt: bool
  entry: dict


def _metadata(variant: families.Variant) -> dict:
  return {"corpus": {"version": CORPUS_VERSION, "variant": variant.name,
                     "family": variant.family,
                     "split": families.split_of(variant),
                     "kind": variant.kind,
                     "args": _plain(variant.args)}}


def _plain(args) -> dict:
  return json.loads(json.dumps(dict(args), sort_keys=True))


def _is_current(path: str, variant: families.Variant) -> bool:
  """Whether the cached file is this variant at this corpus version."""
  try:
    with open(path) as f:
      document = json.load(f)
  except (OSError, ValueError):
    return False
  corpus = (document.get("metadata") or {}).get("corpus") or {}
  return corpus == _metadata(variant)["corpus"]


def build_graph(variant: families.Variant, devices: str) -> op_graph.OpGraph:
  """Builds one variant's training step and costs it for `devices`."""
  from tf_gdp.graph import generators  # pylint: disable=g-import-not-at-top
  if variant.kind == families.GENERATED:
    name, _, options = variant.args["spec"].partition(":")
    graph = generators.generate(
        name, generators.parse_options(variant.args["spec"], name, options),
        label=variant.name)
    document = json_io.to_document(graph)
  else:
    from grappler_bridge import costs  # pylint: disable=g-import-not-at-top
    extracted = _extract(variant)
    document = costs.op_graph_document(
        extracted, presets.kind_hardware(devices), name=variant.name)
  document.setdefault("metadata", {}).update(
      {"devices": devices, **_metadata(variant)})
  return json_io.from_document(document)


def _extract(variant: families.Variant):
  """The variant's step, traced and flattened."""
  # pylint: disable=g-import-not-at-top
  from grappler_bridge import extract
  from tf_gdp import zoo
  from tf_gdp.corpus import captioner
  from tf_gdp.corpus import conformer
  from tf_gdp.corpus import convs2s
  from tf_gdp.corpus import deeplab
  from tf_gdp.corpus import detector
  from tf_gdp.corpus import diffusion
  from tf_gdp.corpus import dual_encoder
  from tf_gdp.corpus import edsr
  from tf_gdp.corpus import gan
  from tf_gdp.corpus import glow
  from tf_gdp.corpus import gnn
  from tf_gdp.corpus import hourglass
  from tf_gdp.corpus import hrnet
  from tf_gdp.corpus import keras3_models
  from tf_gdp.corpus import llama
  from tf_gdp.corpus import mamba
  from tf_gdp.corpus import mobilevit
  from tf_gdp.corpus import moe
  from tf_gdp.corpus import nerf
  from tf_gdp.corpus import perceiver
  from tf_gdp.corpus import pixelcnn
  from tf_gdp.corpus import pointnet
  from tf_gdp.corpus import recommenders
  from tf_gdp.corpus import recurrent
  from tf_gdp.corpus import speech
  from tf_gdp.corpus import swin
  from tf_gdp.corpus import tacotron
  from tf_gdp.corpus import training_steps
  from tf_gdp.corpus import transformers
  from tf_gdp.corpus import video
  from tf_gdp.corpus import vision_models
  from tf_gdp.corpus import vqvae
  # pylint: enable=g-import-not-at-top
  args = dict(variant.args)
  if variant.kind == families.ZOO:
    return zoo.extract(args["model"], **args["knobs"])
  builders = {
      families.KERAS: lambda: training_steps.keras_application(**args),
      families.ENCODER: lambda: transformers.language_model(**args),
      families.DECODER: lambda: transformers.language_model(causal=True,
                                                            **args),
      families.VIT: lambda: transformers.vision_transformer(**args),
      families.TRANSLATION: lambda: transformers.translation_model(**args),
      families.RECURRENT: lambda: recurrent.language_model(**args),
      families.TAGGER: lambda: recurrent.sequence_tagger(**args),
      families.UNET: lambda: vision_models.unet(**args),
      families.MIXER: lambda: vision_models.mlp_mixer(**args),
      families.DLRM: lambda: recommenders.dlrm(**args),
      families.SPEECH: lambda: speech.acoustic_model(**args),
      families.GAN: lambda: gan.dcgan(**args),
      families.DETECTOR: lambda: detector.single_stage_detector(**args),
      families.MOE: lambda: moe.switch_transformer(**args),
      families.GNN: lambda: gnn.graph_classifier(**args),
      families.KERAS3_APPLICATION: lambda: keras3_models.application(**args),
      families.KERAS3_DECODER: lambda: keras3_models.language_model(**args),
      families.DUAL_ENCODER: lambda: dual_encoder.contrastive_model(**args),
      families.PERCEIVER: lambda: perceiver.classifier(**args),
      families.VIDEO: lambda: video.r2plus1d(**args),
      families.POINTNET: lambda: pointnet.pointnet(**args),
      families.SWIN: lambda: swin.swin(**args),
      families.CONFORMER: lambda: conformer.conformer(**args),
      families.HRNET: lambda: hrnet.hrnet(**args),
      families.DIFFUSION: lambda: diffusion.diffusion(**args),
      families.MOBILEVIT: lambda: mobilevit.mobilevit(**args),
      families.DEEPLAB: lambda: deeplab.deeplab(**args),
      families.CAPTIONER: lambda: captioner.captioner(**args),
      families.LLAMA: lambda: llama.llama(**args),
      families.EDSR: lambda: edsr.edsr(**args),
      families.CONVS2S: lambda: convs2s.convs2s(**args),
      families.TACOTRON: lambda: tacotron.tacotron(**args),
      families.MAMBA: lambda: mamba.mamba(**args),
      families.VQVAE: lambda: vqvae.vqvae(**args),
      families.PIXELCNN: lambda: pixelcnn.pixelcnn(**args),
      families.HOURGLASS: lambda: hourglass.hourglass(**args),
      families.NERF: lambda: nerf.nerf(**args),
      families.GLOW: lambda: glow.glow(**args),
  }
  return extract.from_function(builders[variant.kind]())


def describe(graph: op_graph.OpGraph, devices: str) -> dict:
  """The manifest entry: size, and whether one device of `devices` holds it."""
  topology = topology_lib.get(devices)
  result = simulator.simulate(graph, np.zeros(graph.num_nodes, np.int64),
                              topology)
  capacity = float(topology.devices[0].memory_bytes)
  peak = float(result.peak_memory_bytes[0])
  corpus = graph.metadata.get("corpus", {})
  return {"family": corpus.get("family"), "split": corpus.get("split"),
          "nodes": int(graph.num_nodes), "edges": int(graph.num_edges),
          "one_device_peak_gib": round(peak / GIB, 3),
          "device_memory_gib": round(capacity / GIB, 3),
          "fits_one_device": bool(peak <= capacity),
          "one_device_step_ms": round(result.step_time_us / 1e3, 3)}


def ensure(variants: Sequence[families.Variant], devices: str, *,
           root: Optional[str] = None, force: bool = False,
           log: Callable[[str], None] = lambda line: None) -> List[Built]:
  """Every variant's graph, built where the cache lacks a current one.

  Raises:
    errors.InputError: a variant cannot be built (the graphs built before
      it stay cached and in the manifest).
  """
  cache = folder(devices, root)
  manifest = _read_manifest(cache)
  added = {}
  done = []
  try:
    for variant in variants:
      path = graph_path(variant, devices, root)
      rebuilt = force or not _is_current(path, variant)
      if rebuilt:
        started = time.perf_counter()
        log(f"corpus: building {variant.name} ({variant.family})")
        try:
          graph = build_graph(variant, devices)
        except errors.InputError as e:
          raise errors.InputError(f"corpus variant {variant.name}: {e}") from e
        try:
          os.makedirs(os.path.dirname(path), exist_ok=True)
          json_io.save_json(graph, path)
        except OSError as e:
          raise errors.InputError(
              f"cannot write the corpus cache {cache}: {e.strerror or e}") from e
        entry = dict(describe(graph, devices),
                     build_seconds=round(time.perf_counter() - started, 1))
        manifest[variant.name] = added[variant.name] = entry
        log(f"corpus: {variant.name}: {entry['nodes']:,} ops, one device "
            f"{entry['one_device_peak_gib']:.1f} of "
            f"{entry['device_memory_gib']:.1f} GiB")
      elif variant.name not in manifest:
        manifest[variant.name] = added[variant.name] = describe(
            json_io.load_json(path), devices)
      done.append(Built(variant, path, rebuilt, manifest[variant.name]))
  finally:
    if added:
      _merge_manifest(cache, added)
  return done


def _merge_manifest(cache: str, entries: dict) -> None:
  """Adds `entries` to the manifest as it is now on disk, under a lock.

  A build takes minutes; another process may have added its own graphs to
  the manifest meanwhile, which writing back the copy read at the start
  would drop.
  """
  os.makedirs(cache, exist_ok=True)
  with open(os.path.join(cache, MANIFEST + ".lock"), "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    manifest = _read_manifest(cache)
    manifest.update(entries)
    fileio.write_atomically(os.path.join(cache, MANIFEST),
                            json.dumps(manifest, indent=1, sort_keys=True))


def _read_manifest(folder: str) -> dict:
  try:
    with open(os.path.join(folder, MANIFEST)) as f:
      manifest = json.load(f)
  except (OSError, ValueError):
    return {}
  return manifest if isinstance(manifest, dict) else {}


def listing(devices: str, root: Optional[str] = None) -> List[dict]:
  """Every variant of the table with its manifest entry, built or not."""
  manifest = _read_manifest(folder(devices, root))
  rows = []
  for variant in families.VARIANTS.values():
    built = _is_current(graph_path(variant, devices, root), variant)
    entry = manifest.get(variant.name, {}) if built else {}
    rows.append(dict(entry, name=variant.name, family=variant.family,
                     split=families.split_of(variant), built=built))
  return rows


def format_manifest(rows: Sequence[dict]) -> str:
  """One line per graph: split, family, ops, one device's memory need."""
  header = (f"{'graph':<34} {'split':<5} {'family':<16} {'ops':>7} "
            f"{'1-dev GiB':>9} {'fits 1':>6} {'1-dev ms':>9}")
  lines = [header, "-" * len(header)]
  for row in rows:
    if "nodes" not in row:
      lines.append(f"{row['name']:<34} {row['split']:<5} {row['family']:<16}"
                   "   (not built)")
      continue
    lines.append(
        f"{row['name']:<34} {row['split']:<5} {row['family']:<16} "
        f"{row['nodes']:>7,} {row['one_device_peak_gib']:>9.1f} "
        f"{'yes' if row['fits_one_device'] else 'NO':>6} "
        f"{row['one_device_step_ms']:>9.1f}")
  return "\n".join(lines)
