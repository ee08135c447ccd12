"""Names of the zoo's models, their knobs, and building them by name.

Builders are imported on first use, so listing the models does not import
TensorFlow; reading knob defaults (from the builder's signature) does.
"""

import dataclasses
import importlib
import types
from typing import Optional

from grappler_bridge import errors
from tf_gdp.zoo import knobs as knobs_lib


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """A named builder: `module.build_train_step` with some knobs fixed.

  Calling a spec checks the knobs and builds the model:
  `MODELS["gnmt4"](batch=8)` is `build("gnmt4", batch=8)`.
  """
  name: str
  module: str
  description: str
  fixed: dict = dataclasses.field(default_factory=dict)
  # The model of the same builder with no knob fixed ("gnmt" for "gnmt4").
  family: str = ""

  @property
  def builder(self):
    return importlib.import_module(self.module).build_train_step

  def defaults(self) -> dict:
    """Knobs one may set, with their defaults (fixed knobs excluded)."""
    return {k: v for k, v in knobs_lib.defaults_of(self.builder).items()
            if k not in self.fixed}

  def check(self, knobs: dict) -> dict:
    """Returns `knobs` typed after the defaults, or raises InputError."""
    defaults = self.defaults()
    for key, value in knobs.items():
      if key in self.fixed and value != self.fixed[key]:
        raise errors.InputError(
            f"model {self.name!r} fixes {key}={self.fixed[key]}; "
            f"use model {(self.family or self.name)!r} to choose {key}")
    unknown = sorted(set(knobs) - set(defaults) - set(self.fixed))
    if unknown:
      raise errors.InputError(
          f"unknown knob(s) {', '.join(unknown)} for model {self.name!r}; "
          f"known: {', '.join(defaults)}")
    return {k: knobs_lib.coerce(k, v, defaults[k])
            for k, v in knobs.items() if k not in self.fixed}

  def __call__(self, **knobs):
    return self.builder(**self.fixed, **self.check(knobs))


def _preset(family: str, knob: str, value: int, description: str):
  """`family` with `knob` fixed to `value`, named family + value."""
  return ModelSpec(f"{family}{value}", f"tf_gdp.zoo.{family}", description,
                   {knob: value}, family=family)


def _gnmt(num_layers: int) -> ModelSpec:
  return _preset("gnmt", "num_layers", num_layers,
                 f"GNMT seq2seq, {num_layers} LSTM layers per side, unrolled")


def _rnnlm(num_layers: int) -> ModelSpec:
  return _preset("rnnlm", "num_layers", num_layers,
                 f"LSTM language model, {num_layers} layers, unrolled")


def _transformer_xl(num_layers: int) -> ModelSpec:
  return _preset("transformer_xl", "num_layers", num_layers,
                 f"Transformer-XL language model, {num_layers} layers, "
                 "2 segments with memory")


def _wavenet(num_stacks: int) -> ModelSpec:
  return _preset("wavenet", "num_stacks", num_stacks,
                 f"WaveNet, {num_stacks} stacks of dilated causal convs")


MODELS = types.MappingProxyType({
    "inception_v3": ModelSpec("inception_v3", "tf_gdp.zoo.inception_v3",
                              "Keras Inception-v3 image classifier"),
    "amoebanet": ModelSpec("amoebanet", "tf_gdp.zoo.amoebanet",
                           "AmoebaNet-A image classifier from its cell spec"),
    "gnmt": ModelSpec("gnmt", "tf_gdp.zoo.gnmt",
                      "GNMT seq2seq with attention, statically unrolled"),
    "gnmt2": _gnmt(2),
    "gnmt4": _gnmt(4),
    "gnmt8": _gnmt(8),
    "rnnlm": ModelSpec("rnnlm", "tf_gdp.zoo.rnnlm",
                       "LSTM language model, statically unrolled"),
    "rnnlm2": _rnnlm(2),
    "rnnlm4": _rnnlm(4),
    "transformer_xl": ModelSpec(
        "transformer_xl", "tf_gdp.zoo.transformer_xl",
        "Transformer-XL language model: segment memory, relative positions"),
    "transformer_xl2": _transformer_xl(2),
    "transformer_xl4": _transformer_xl(4),
    "transformer_xl8": _transformer_xl(8),
    "wavenet": ModelSpec("wavenet", "tf_gdp.zoo.wavenet",
                         "WaveNet: stacks of dilated causal convolutions"),
    "wavenet2": _wavenet(2),
    "wavenet4": _wavenet(4),
})

# The graphs of the GDP paper's benchmark (its Table 1), by zoo name.
BENCHMARK_MODELS = (
    "rnnlm2", "rnnlm4", "gnmt2", "gnmt4", "gnmt8", "transformer_xl2",
    "transformer_xl4", "transformer_xl8", "inception_v3", "amoebanet",
    "wavenet2", "wavenet4")


def list_models() -> list:
  """Model names, sorted."""
  return sorted(MODELS)


def benchmark_models() -> list:
  """The benchmark's model names, in the paper's order (no family aliases)."""
  return list(BENCHMARK_MODELS)


def default_knobs(name: str) -> dict:
  """The knobs of model `name` and their default values."""
  return _spec(name).defaults()


def parse_knobs(text: str, name: Optional[str] = None) -> dict:
  """Parses "batch=8,num_layers=2" into typed values.

  Types follow the defaults of model `name`'s builder; without a name, of
  any model that has the knob (the zoo keeps one type per knob name).
  """
  pairs = knobs_lib.split_pairs(text)
  if name is not None:
    return check_knobs(name, pairs)
  known = {}
  for model in list_models():
    for key, default in MODELS[model].defaults().items():
      known.setdefault(key, default)
  unknown = sorted(set(pairs) - set(known))
  if unknown:
    raise errors.InputError(
        f"unknown knob(s) {', '.join(unknown)}; known: "
        f"{', '.join(sorted(known))}")
  return {k: knobs_lib.coerce(k, v, known[k]) for k, v in pairs.items()}


def check_knobs(name: str, knobs: dict) -> dict:
  """Returns `knobs` typed for model `name`, or raises InputError."""
  return _spec(name).check(knobs)


def build(name: str, **knobs):
  """Builds model `name`: returns (tf.function train step, example args)."""
  return _spec(name)(**knobs)


def extract(name: str, **knobs):
  """Builds model `name` and flattens its step into an ExtractedGraph."""
  # Imported here: the bridge imports TensorFlow.
  from grappler_bridge import extract as extract_lib  # pylint: disable=g-import-not-at-top
  step, args = build(name, **knobs)
  return extract_lib.from_function(step, *args)


def _spec(name: str) -> ModelSpec:
  if name not in MODELS:
    raise errors.InputError(
        f"unknown model {name!r}; known: {', '.join(list_models())}")
  return MODELS[name]
