"""Scope coordinates: layer numbers read from name scopes, model-agnostic."""

import numpy as np
import pytest

from tf_gdp.graph import scopes


def test_layers_get_ranks_on_a_common_scale_and_backward_ops_follow():
  names = ["encoder/layer_0/t0/MatMul", "encoder/layer_1/t0/MatMul",
           "encoder/layer_3/t1/MatMul_1",
           "gradient_tape/encoder/layer_3/t1/MatMul",
           "decoder/layer_2/t0/add", "inputs_0"]
  ids, ranks, counts = scopes.scope_coordinates(names)
  # encoder layers 0, 1, 3 -> ranks 0, 1/2, 1; the decoder has one layer.
  np.testing.assert_allclose(ranks[:, 0], [0.0, 0.5, 1.0, 1.0, 0.0, 0.0])
  np.testing.assert_allclose(ranks[:, 1], [0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
  assert ids[0, 0] == ids[4, 0] == scopes.stem_id("layer_")
  assert ids[0, 1] == scopes.stem_id("t") and ids[0, 1] != ids[0, 0]
  # An op's own name (`MatMul_1`, `inputs_0`) is not a scope.
  assert (ids[5] == 0).all() and (ranks[5] == 0).all()
  np.testing.assert_allclose(counts[0, 0], np.log1p(2) / 5)
  assert counts[4, 0] == 0.0


@pytest.mark.parametrize("name, forward", [
    ("gradient_tape/disc/conv_1/Conv2D_grad", "disc/conv_1/Conv2D_grad"),
    ("gradient_tape_1/gen/up_0/BiasAddGrad", "gen/up_0/BiasAddGrad"),
    ("gradients_12/dense/MatMul_grad/MatMul", "dense/MatMul_grad/MatMul"),
    ("gradient_tapes/dense/MatMul", None),
    ("my_gradients/dense/MatMul", None),
    ("dense/gradient_tape/MatMul", None)])
def test_every_gradient_scope_tf_names_is_backward(name, forward):
  # A second tape (a GAN's generator and discriminator) gets `_1`.
  assert scopes.forward_name(name) == forward


def test_numbers_rank_numerically_and_unnumbered_scopes_do_not_count():
  names = [f"stack_{s}/conv1d/layer_{l}/op" for s in (0, 1)
           for l in (2, 10, 9)]
  ids, ranks, _ = scopes.scope_coordinates(names)
  np.testing.assert_allclose(ranks[:, 0], [0, 0, 0, 1, 1, 1])
  np.testing.assert_allclose(ranks[:, 1], [0, 1, 0.5] * 2)
  assert (ids[:, 1] == scopes.stem_id("layer_")).all()
  assert ((ids >= 0) & (ids < scopes.SCOPE_VOCAB)).all()


def test_stem_spelling_does_not_matter():
  assert (scopes.stem_id("layer_") == scopes.stem_id("layer") ==
          scopes.stem_id("Layer-"))
  assert scopes.stem_id("layer") != scopes.stem_id("t")


def test_stage_follows_the_main_numbered_stem_and_the_data_flow():
  # embedding -> layer_0 -> layer_1 -> softmax/t0, softmax/t1 -> loss sum;
  # a variable read only by layer_1; a backward sum fed by layers 0 and 1
  # and consumed by layer 0's gradient; an isolated op.
  names = ["embedding/lookup", "lstm/layer_0/t0/mm", "lstm/layer_0/t1/mm",
           "lstm/layer_1/t0/mm", "lstm/layer_1/t1/mm", "softmax/t0/mm",
           "softmax/t1/mm", "AddN_3", "lstm/kernel_read", "alone", "AddN_4",
           "gradient_tape/lstm/layer_0/t0/mm"]
  edges = [(0, 1), (1, 2), (1, 3), (2, 4), (3, 4), (3, 5), (4, 6), (5, 7),
           (6, 7), (8, 3), (4, 10), (2, 10), (10, 11)]
  src, dst = zip(*edges)
  order = [0, 8, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11]
  stage, known = scopes.stage_coordinates(names, src, dst, order)
  # `layer` (5 ops) beats `t` (2 outermost ops) as the main stem.
  np.testing.assert_allclose(stage[1:5], [0, 0, 1, 1])
  np.testing.assert_allclose(stage[5:8], [1, 1, 1])  # after the last layer
  assert stage[0] == 0 and stage[8] == 1  # their consumers' stages
  assert stage[10] == 0 and stage[11] == 0  # the median of 1, 0 and 0
  assert known[:9].all() and not known[9]
  # Without the median sweeps the sum takes its latest input's stage.
  assert scopes.stage_coordinates(names, src, dst, order,
                                  refine_rounds=0)[0][10] == 1
  # No numbered stem with two numbers: no stages at all.
  stage, known = scopes.stage_coordinates(["a/x", "layer_0/y"], [0], [1],
                                          [0, 1])
  assert not known.any()


def test_neighbour_median_rule_weighs_consumers_in_the_first_pass():
  # layer_2/a -> glue -> layer_0/b, layer_1/b: the latest input says the
  # last stage, the median of all staged neighbours the middle one.
  names = ["layer_2/a", "glue", "layer_0/b", "layer_1/b"]
  src, dst, order = [0, 1, 1], [1, 2, 3], [0, 1, 2, 3]
  latest, known = scopes.stage_coordinates(names, src, dst, order,
                                           refine_rounds=0)
  median, median_known = scopes.stage_coordinates(
      names, src, dst, order, refine_rounds=0, rule="neighbour_median")
  assert latest[1] == 1.0 and median[1] == 0.5
  np.testing.assert_array_equal(known, median_known)
  np.testing.assert_allclose(latest[[0, 2, 3]], median[[0, 2, 3]])
  with pytest.raises(ValueError, match="unknown stage rule"):
    scopes.stage_coordinates(names, src, dst, order, rule="first")


def test_inner_major_rule_orders_blocks_segment_first():
  # 2 layers x 2 segments, plus a layer variable without a segment, a
  # nested stem that only one op carries, and an unnumbered loss.
  names = ["layer_0/segment_0/a", "layer_1/segment_0/a",
           "layer_0/segment_1/a", "layer_1/segment_1/a",
           "layer_1/kernel", "layer_0/head_3/x", "loss"]
  edges = [(0, 1), (0, 2), (2, 3), (1, 3), (4, 1), (4, 3), (3, 6), (0, 5)]
  src, dst = zip(*edges)
  order = [4, 0, 5, 1, 2, 3, 6]
  stage, known = scopes.stage_coordinates(names, src, dst, order,
                                          rule="inner_major")
  # Segment 0 of both layers first, then segment 1: stages 0, 1/3, 2/3, 1.
  np.testing.assert_allclose(stage[:4], [0, 1 / 3, 2 / 3, 1])
  assert stage[5] == 0 and known[5]  # one `head_` number: it inherits
  assert stage[4] == 1 / 3  # the median of its consumers' 1/3 and 1
  assert stage[6] == 1 and known.all()
  # Without a second numbered level no op has a stage under this rule.
  stage, known = scopes.stage_coordinates(
      ["layer_0/a", "layer_1/a"], [0], [1], [0, 1], rule="inner_major")
  assert not known.any()
