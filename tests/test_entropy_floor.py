"""The entropy floor that lets a too-certain pre-trained policy explore."""

import math

import numpy as np
import pytest

from tf_gdp.rl import exploration  # pylint: disable=g-bad-import-order
from tf_gdp.policy import network


def _entropy_fraction(logits, factor):
  p = np.exp(logits * factor - np.max(logits * factor))
  p /= p.sum()
  return -np.sum(p * np.log(p)) / math.log(len(p))


def test_scale_reaches_the_floor_and_keeps_the_order():
  logits = np.array([[12.0, 0.0, -3.0]])
  factor = exploration.entropy_floor_scale(logits, [True], 0.5)
  assert 0 < factor < 1
  assert _entropy_fraction(logits[0], factor) == pytest.approx(0.5, abs=1e-6)
  assert np.argmax(logits[0] * factor) == 0  # the preference survives


def test_random_enough_policies_and_forced_groups_are_left_alone():
  uniform = np.zeros((2, 4))
  assert exploration.entropy_floor_scale(uniform, [True, True], 0.5) == 1.0
  # A group with one allowed device (the rest masked) has no choice to make;
  # padding groups do not count either.
  forced = np.array([[5.0, network.NEG_LOGIT], [9.0, 0.0]])
  assert exploration.entropy_floor_scale(forced, [True, False], 0.5) == 1.0
  assert exploration.entropy_floor_scale(forced, [True, True], 0.0) == 1.0
  assert exploration.entropy_floor_scale(forced, [True, True], 0.3) < 1.0
