"""Tests of the model zoo at toy sizes: builds, trains, flattens, is named."""

import numpy as np
import pytest

from grappler_bridge import extract as extract_lib
from tf_gdp import zoo
from tf_gdp.errors import InputError

# Toy GNMT: seconds to build, trace and flatten.
TINY_GNMT = dict(hidden_size=8, vocab_size=50, batch=4, source_length=3,
                 target_length=3)
TINY_INCEPTION = dict(batch=2, image_size=75, num_classes=10)
CONTROL_FLOW_OPS = {"While", "StatelessWhile", "If", "StatelessIf", "Switch",
                    "Merge", "Enter", "Exit", "NextIteration"}


def _op_types(extracted):
  return {node.op for node in extracted.graph_def.node}


def _node_names(extracted):
  return [node.name for node in extracted.graph_def.node]


def _values(variables):
  return [v.numpy().copy() for v in variables]


def test_public_api_is_pinned():
  assert sorted(zoo.__all__) == [
      "MODELS", "ModelSpec", "benchmark_models", "build", "check_knobs",
      "default_knobs", "extract", "list_models", "parse_knobs"]


def test_list_models():
  assert zoo.list_models() == [
      "amoebanet", "gnmt", "gnmt2", "gnmt4", "gnmt8", "inception_v3",
      "rnnlm", "rnnlm2", "rnnlm4", "transformer_xl", "transformer_xl2",
      "transformer_xl4", "transformer_xl8", "wavenet", "wavenet2",
      "wavenet4"]
  assert zoo.benchmark_models() == [
      "rnnlm2", "rnnlm4", "gnmt2", "gnmt4", "gnmt8", "transformer_xl2",
      "transformer_xl4", "transformer_xl8", "inception_v3", "amoebanet",
      "wavenet2", "wavenet4"]
  assert zoo.default_knobs("gnmt")["num_layers"] == 2
  assert "num_layers" not in zoo.default_knobs("gnmt8")
  assert zoo.default_knobs("inception_v3")["batch"] == 32


@pytest.mark.parametrize("call, message", [
    (lambda: zoo.build("resnet"), "known: amoebanet, gnmt, gnmt2"),
    (lambda: zoo.extract("gnmt", colour=3), "unknown knob(s) colour"),
    (lambda: zoo.build("gnmt8", num_layers=2), "fixes num_layers=8"),
    (lambda: zoo.build("gnmt", batch="many"), "expected int"),
    (lambda: zoo.build("gnmt", batch=0), "batch must be >= 1"),
    (lambda: zoo.build("gnmt", num_layers=1), "num_layers must be >= 2"),
    (lambda: zoo.build("gnmt", optimizer="rmsprop"), "unknown optimizer"),
    (lambda: zoo.build("inception_v3", image_size=32), "image_size"),
    (lambda: zoo.parse_knobs("batch"), "expected name=value"),
    (lambda: zoo.parse_knobs("batch=1,batch=2"), "given twice"),
    (lambda: zoo.parse_knobs("wings=2"), "unknown knob(s) wings"),
    (lambda: zoo.parse_knobs("learning_rate=nan", "gnmt"), "expected float"),
])
def test_bad_input_raises_one_line_input_error(call, message):
  with pytest.raises(InputError) as info:
    call()
  assert message in str(info.value)
  assert "\n" not in str(info.value)


def test_parse_knobs_types_follow_defaults():
  assert zoo.parse_knobs("batch=8, num_layers=2") == {
      "batch": 8, "num_layers": 2}
  assert zoo.parse_knobs(
      "learning_rate=1,optimizer=adam,aux_logits=false", "inception_v3") == {
          "learning_rate": 1.0, "optimizer": "adam", "aux_logits": False}
  assert zoo.parse_knobs("") == {}
  assert zoo.check_knobs("gnmt4", {"num_layers": 4, "batch": "3"}) == {
      "batch": 3}


def test_a_knob_name_has_one_type_across_models():
  types_by_knob = {}
  for name in zoo.list_models():
    for knob, default in zoo.default_knobs(name).items():
      types_by_knob.setdefault(knob, set()).add(type(default))
  assert all(len(types) == 1 for types in types_by_knob.values())


def test_inception_step_trains_and_flattens():
  step, args = zoo.build("inception_v3", **TINY_INCEPTION)
  first = float(step(*args))
  second = float(step(*args))
  assert np.isfinite(first) and first != second
  extracted = extract_lib.from_function(step, *args)
  ops = _op_types(extracted)
  assert {"Conv2D", "Conv2DBackpropFilter", "FusedBatchNormGradV3",
          "ResourceApplyGradientDescent"} <= ops
  assert len(extracted.graph_def.node) > 4000
  names = _node_names(extracted)
  assert any(name.startswith("inception_v3/aux_0_conv/") for name in names)


def test_inception_names_do_not_depend_on_earlier_builds():
  names = []
  for _ in range(2):
    step, args = zoo.build("inception_v3", aux_logits=False, **TINY_INCEPTION)
    graph = step.get_concrete_function(*args).graph
    names.append([op.name for op in graph.get_operations()])
  assert names[0] == names[1]


def test_gnmt_sgd_step_lowers_the_loss():
  step, args = zoo.build("gnmt", dropout=0.0, **TINY_GNMT)
  losses = [float(step(*args)) for _ in range(3)]
  assert losses[0] > losses[1] > losses[2]


def test_gnmt_adam_step_updates_the_variables():
  step, args = zoo.build("gnmt", optimizer="adam", learning_rate=0.01,
                         **TINY_GNMT)
  concrete = step.get_concrete_function(*args)
  variables = [v for v in concrete.graph.variables if v.trainable]
  before = _values(variables)
  step(*args)
  after = _values(variables)
  changed = {v.name for v, b, a in zip(variables, before, after)
             if not np.array_equal(b, a)}
  # Attention's gradients are ~0 at init (near-linear tanh), so skip them.
  assert {v.name for v in variables if "attention" not in v.name} <= changed
  assert len(changed) > len(variables) // 2
  assert "ResourceApplyAdam" in _op_types(
      extract_lib.from_concrete_function(concrete))


def test_gnmt_graph_is_unrolled_and_scoped_by_layer():
  extracted = zoo.extract("gnmt", num_layers=3, **TINY_GNMT)
  assert not _op_types(extracted) & CONTROL_FLOW_OPS
  names = _node_names(extracted)
  expected = ["embedding/encoder/", "embedding/decoder/", "attention/t2/",
              "softmax/t0/", "loss/", "encoder/layer_0/fw/t2/",
              "encoder/layer_0/bw/t0/", "gradient_tape/decoder/layer_2/t1/"]
  for side in ("encoder", "decoder"):
    for layer in range(3):
      for t in range(3):
        expected.append(f"{side}/layer_{layer}/" +
                        ("fw/" if side == "encoder" and layer == 0 else "") +
                        f"t{t}/")
  for prefix in expected:
    assert any(name.startswith(prefix) for name in names), prefix
  assert any(name.startswith("encoder/layer_2/residual_t") for name in names)
  updates = [n.name for n in extracted.graph_def.node
             if n.op == "ResourceApplyGradientDescent"]
  assert "decoder/layer_1/kernel/sgd/ResourceApplyGradientDescent" in updates
  # Embedding gradients stay sparse: only the looked-up rows are updated.
  assert "embedding/encoder/table/sgd/ResourceScatterSub" in names
  # Control outputs (the updates) are fetches, so flattening keeps them.
  assert set(updates) <= set(extracted.fetches)


def test_gnmt_nodes_grow_with_layers_and_convenience_names_fix_them():
  counts = [len(zoo.extract("gnmt", num_layers=n, **TINY_GNMT).graph_def.node)
            for n in (2, 3)]
  gnmt4 = _node_names(zoo.extract("gnmt4", **TINY_GNMT))
  assert counts[0] < counts[1] < len(gnmt4)
  assert any(name.startswith("decoder/layer_3/") for name in gnmt4)
  assert not any(name.startswith("decoder/layer_4/") for name in gnmt4)
