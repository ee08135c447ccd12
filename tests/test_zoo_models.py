"""The zoo's AmoebaNet, RNNLM, Transformer-XL and WaveNet at toy sizes.

Each model: one build, two training steps, one flattening of the same
trace (tracing dominates the time), then checks on the flat graph: the
layer / role name scopes exist, the update ops are fetched, and the
statically unrolled models hold no control flow.
"""

import re

import numpy as np
import pytest
import tensorflow as tf

from grappler_bridge import extract as extract_lib
from tf_gdp import zoo
from tf_gdp.errors import InputError
from tf_gdp.zoo import amoebanet
from tf_gdp.zoo import transformer_xl
from tf_gdp.zoo import wavenet

TINY = {
    "amoebanet": dict(num_cells=1, filters=8, image_size=32, batch=2,
                      num_classes=10),
    "rnnlm": dict(num_layers=3, hidden_size=8, vocab_size=50, batch=4,
                  num_steps=3, dropout=0.0),
    "transformer_xl": dict(num_layers=2, model_size=8, num_heads=2,
                           head_size=4, inner_size=16, vocab_size=20,
                           batch=2, segment_length=4, memory_length=3,
                           num_segments=3),
    "wavenet": dict(num_stacks=2, layers_per_stack=3, residual_channels=4,
                    dilation_channels=4, skip_channels=8,
                    quantization_levels=16, batch=2, audio_length=16,
                    optimizer="adam"),
}
CONTROL_FLOW_OPS = {"While", "StatelessWhile", "If", "StatelessIf", "Switch",
                    "Merge", "Enter", "Exit", "NextIteration"}
UPDATE_OPS = {"ResourceApplyGradientDescent", "ResourceApplyAdam",
              "ResourceScatterSub"}


class Trained:
  """A toy model's losses over two steps, its variables and its flat graph."""

  def __init__(self, name):
    step, args = zoo.build(name, **TINY[name])
    concrete = step.get_concrete_function(*args)
    self.all_variables = list(concrete.graph.variables)
    self.initial = {v.name: v.numpy().copy() for v in self.all_variables}
    self.variables = [v for v in self.all_variables if v.trainable]
    self.losses = [float(step(*args)) for _ in range(2)]
    self.changed = [not np.array_equal(self.initial[v.name], v.numpy())
                    for v in self.variables]
    self.extracted = extract_lib.from_concrete_function(concrete)
    self.nodes = list(self.extracted.graph_def.node)
    self.names = [node.name for node in self.nodes]
    self.op_types = {node.op for node in self.nodes}

  def has_prefix(self, prefix):
    return any(name.startswith(prefix) for name in self.names)

  def check_trains_and_fetches_updates(self):
    assert all(np.isfinite(self.losses)), self.losses
    assert self.losses[0] != self.losses[1]
    assert sum(self.changed) > len(self.changed) // 2
    updates = [n.name for n in self.nodes if n.op in UPDATE_OPS]
    assert len(updates) >= len(self.variables)
    assert set(updates) <= set(self.extracted.fetches)


@pytest.fixture(scope="module")
def trained():
  cache = {}

  def get(name):
    if name not in cache:
      cache[name] = Trained(name)
    return cache[name]

  return get


def test_registry_names_and_presets():
  models = zoo.list_models()
  for name in ("amoebanet", "rnnlm", "rnnlm2", "rnnlm4", "transformer_xl",
               "transformer_xl2", "transformer_xl4", "transformer_xl8",
               "wavenet", "wavenet2", "wavenet4"):
    assert name in models
  assert set(zoo.benchmark_models()) <= set(models)
  assert len(zoo.benchmark_models()) == 12
  assert "num_layers" not in zoo.default_knobs("rnnlm4")
  assert "num_stacks" not in zoo.default_knobs("wavenet2")
  assert zoo.default_knobs("wavenet4")["layers_per_stack"] == 10
  assert zoo.default_knobs("amoebanet")["num_cells"] == 6
  assert zoo.default_knobs("amoebanet")["filters"] == 190
  assert zoo.MODELS["transformer_xl8"].fixed == {"num_layers": 8}


@pytest.mark.parametrize("call, message", [
    (lambda: zoo.build("rnnlm2", num_layers=3), "use model 'rnnlm'"),
    (lambda: zoo.build("wavenet4", num_stacks=2), "use model 'wavenet'"),
    (lambda: zoo.build("wavenet", filter_width=1), "filter_width"),
    (lambda: zoo.build("transformer_xl", num_segments=1), "num_segments"),
    (lambda: zoo.build("amoebanet", image_size=16), "image_size"),
    (lambda: zoo.build("amoebanet", filters=2), "filters must be >= 4"),
    (lambda: zoo.build("rnnlm", dropout=1.0), "dropout"),
])
def test_bad_knobs_raise_one_line_input_error(call, message):
  with pytest.raises(InputError) as info:
    call()
  assert message in str(info.value)
  assert "\n" not in str(info.value)


def test_amoebanet_cell_spec_is_well_formed():
  for spec in (amoebanet.NORMAL_CELL, amoebanet.REDUCTION_CELL):
    assert len(spec.combinations) == 5
    for k, pair in enumerate(spec.combinations):
      for _, source in pair:
        assert 0 <= source < 2 + k  # reads only states that exist
    assert set(spec.outputs) <= set(range(2 + len(spec.combinations)))
  # Every new state is used: as an input to a later one or in the output.
  for spec in (amoebanet.NORMAL_CELL, amoebanet.REDUCTION_CELL):
    read = {s for pair in spec.combinations for _, s in pair}
    assert set(range(2, 7)) <= read | set(spec.outputs)


def test_amoebanet_cells_shapes():
  rng = tf.random.Generator.from_seed(0)
  x = tf.random.normal([2, 8, 8, 12])
  normal = amoebanet._Cell(rng, "n/", amoebanet.NORMAL_CELL, 6, 12, 12,
                           False, False)
  reduction = amoebanet._Cell(rng, "r/", amoebanet.REDUCTION_CELL, 6, 12, 12,
                              False, True)
  assert normal(x, x).shape == [2, 8, 8, 4 * 6]
  assert reduction(x, x).shape == [2, 4, 4, 5 * 6]


def test_amoebanet_trains_and_is_scoped_by_cell(trained):
  model = trained("amoebanet")
  model.check_trains_and_fetches_updates()
  assert {"DepthwiseConv2dNative", "Conv2DBackpropFilter",
          "FusedBatchNormGradV3", "AvgPool", "MaxPool"} <= model.op_types
  for prefix in ("stem/", "stem_cell_0/prepare/input/", "stem_cell_1/",
                 "stack_0/cell_0/comb_3/right_sep_conv_5x5/rep_1/",
                 "reduction_0/comb_3/right_conv_1x7_7x1/pre_1x1/",
                 "reduction_0/comb_3/right_conv_1x7_7x1/7x1/",
                 "reduction_1/", "stack_2/cell_0/prepare/previous/path_1/",
                 "head/", "loss/", "weight_decay/",
                 "gradient_tape/stack_1/cell_0/comb_0/"):
    assert model.has_prefix(prefix), prefix
  # Batch-norm moving averages are updated in the step too.
  assert "AssignSubVariableOp" in model.op_types


def test_rnnlm_trains_unrolled_by_layer_and_step(trained):
  model = trained("rnnlm")
  model.check_trains_and_fetches_updates()
  assert model.losses[0] > model.losses[1]
  assert not model.op_types & CONTROL_FLOW_OPS
  for layer in range(3):
    for t in range(3):
      assert model.has_prefix(f"lstm/layer_{layer}/t{t}/")
      assert model.has_prefix(f"gradient_tape/lstm/layer_{layer}/t{t}/")
  for prefix in ("embedding/", "softmax/t2/", "loss/",
                 "lstm/layer_2/kernel/sgd/", "embedding/table/sgd/"):
    assert model.has_prefix(prefix), prefix
  assert not model.has_prefix("lstm/layer_3/")


def test_transformer_xl_trains_over_segments_with_memory(trained):
  model = trained("transformer_xl")
  model.check_trains_and_fetches_updates()
  assert not model.op_types & CONTROL_FLOW_OPS
  for layer in range(2):
    for segment in range(3):
      for role in ("attention", "ffn"):
        assert model.has_prefix(
            f"layer_{layer}/segment_{segment}/{role}/"), (layer, segment)
    assert model.has_prefix(f"layer_{layer}/memory/")
  for prefix in ("embedding/segment_2/", "positions/", "softmax/segment_1/",
                 "loss/", "gradient_tape/layer_1/segment_2/attention/"):
    assert model.has_prefix(prefix), prefix
  # The memory enters the next segment under stop_gradient: no backward op
  # runs through it into the previous segment.
  assert not any(re.match(r"gradient_tape/layer_\d+/memory/", name)
                 for name in model.names)


def test_transformer_xl_carries_memory_across_steps(trained):
  model = trained("transformer_xl")
  memories = [v for v in model.all_variables if "memory" in v.name]
  assert len(memories) == 2 and not any(v.trainable for v in memories)
  assert memories[0].shape == [2, 3, 8]  # [batch, memory_length, model]
  # Zero before the first step; the last segment's layer inputs after it.
  assert all(not np.any(model.initial[v.name]) for v in memories)
  assert all(np.any(v.numpy()) for v in memories)


def test_relative_shift_aligns_distances_to_keys():
  queries, memory = 3, 4
  keys = queries + memory
  scores = np.random.default_rng(0).random((2, queries, keys), np.float32)
  shifted = transformer_xl.relative_shift(tf.constant(scores)).numpy()
  for i in range(queries):
    for j in range(memory + i + 1):  # keys the query may see
      # Column p of `scores` is distance keys-1-p; key j is at distance
      # memory+i-j from query i.
      p = keys - 1 - (memory + i - j)
      np.testing.assert_allclose(shifted[:, i, j], scores[:, i, p])


def test_wavenet_trains_and_is_scoped_by_stack_and_layer(trained):
  model = trained("wavenet")
  model.check_trains_and_fetches_updates()
  assert not model.op_types & CONTROL_FLOW_OPS
  for stack in range(2):
    for layer in range(3):
      for role in ("filter", "gate", "skip", "residual"):
        if (stack, layer, role) != (1, 2, "residual"):
          assert model.has_prefix(f"stack_{stack}/layer_{layer}/{role}/")
  # The last layer's residual output would feed nothing: it has none.
  assert not model.has_prefix("stack_1/layer_2/residual/")
  for prefix in ("input/", "output/", "loss/",
                 "gradient_tape/stack_1/layer_2/gate/",
                 "stack_0/layer_1/filter/kernel/adam/"):
    assert model.has_prefix(prefix), prefix
  # Conv1D runs as Conv2D on [batch, 1, time, channels]: time is axis 2.
  dilations = {node.attr["dilations"].list.i[2] for node in model.nodes
               if node.op == "Conv2D"}
  assert dilations == {1, 2, 4}


def test_wavenet_is_causal():
  model = wavenet.WaveNet(num_stacks=2, layers_per_stack=3,
                          residual_channels=4, dilation_channels=4,
                          skip_channels=8, quantization_levels=16,
                          filter_width=2)
  assert model.receptive_field == 2 * (1 + 2 + 4) + 2
  samples = np.random.default_rng(1).integers(0, 16, (1, 20)).astype(np.int32)
  changed = samples.copy()
  changed[:, 12:] = (changed[:, 12:] + 5) % 16
  before = model.logits(tf.constant(samples)).numpy()
  after = model.logits(tf.constant(changed)).numpy()
  np.testing.assert_allclose(before[:, :12], after[:, :12], rtol=1e-6)
  assert not np.allclose(before[:, 12:], after[:, 12:])
