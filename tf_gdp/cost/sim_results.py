"""What one simulated step returns: step time, per-device figures, schedule.

The result types of `simulator.simulate` and `simulator.simulate_batch`.
"""

import dataclasses
from typing import Optional

import numpy as np


@dataclasses.dataclass(frozen=True)
class Schedule:
  """When each op and transfer ran (for Gantt charts and debugging).

  Attributes:
    op_device: int[n] device index per op (the placement).
    op_start_us, op_end_us: float[n] start and end time per op.
    transfer_node: int[x] producer op of each transfer.
    transfer_output: int[x] output slot of the producer carried.
    transfer_src_device, transfer_dst_device: int[x] the directed link.
    transfer_bytes: int[x] bytes moved.
    transfer_start_us, transfer_end_us: float[x] when the link carried it.
  """
  op_device: np.ndarray
  op_start_us: np.ndarray
  op_end_us: np.ndarray
  transfer_node: np.ndarray
  transfer_output: np.ndarray
  transfer_src_device: np.ndarray
  transfer_dst_device: np.ndarray
  transfer_bytes: np.ndarray
  transfer_start_us: np.ndarray
  transfer_end_us: np.ndarray


@dataclasses.dataclass(frozen=True)
class SimResult:
  """Outcome of simulating one placement.

  Attributes:
    step_time_us: when the last op or transfer finished.
    device_busy_us: float[d] total op time per device.
    peak_memory_bytes: int[d] peak of persistent + live bytes per device.
    transfer_bytes: total bytes moved between devices.
    num_transfers: number of tensor transfers (control signals excluded).
    valid: memory fits (when checked) and all hard constraints hold.
    reason: why the placement is invalid (problems joined by "; "), or None.
    schedule: per-op and per-transfer times when `record_schedule=True`.
  """
  step_time_us: float
  device_busy_us: np.ndarray
  peak_memory_bytes: np.ndarray
  transfer_bytes: int
  num_transfers: int
  valid: bool
  reason: Optional[str] = None
  schedule: Optional[Schedule] = None


@dataclasses.dataclass(frozen=True)
class BatchSimResult:
  """Outcomes of B placements of one graph, as arrays (first axis = B).

  Attributes:
    step_time_us: float[B].
    device_busy_us: float[B, d].
    peak_memory_bytes: int[B, d].
    transfer_bytes: int[B].
    num_transfers: int[B].
    fits_memory: bool[B], every device's peak fits its capacity.
    satisfies_constraints: bool[B], kinds, colocation and pins hold.
    valid: bool[B], both of the above (memory only when checked).
  """
  step_time_us: np.ndarray
  device_busy_us: np.ndarray
  peak_memory_bytes: np.ndarray
  transfer_bytes: np.ndarray
  num_transfers: np.ndarray
  fits_memory: np.ndarray
  satisfies_constraints: np.ndarray
  valid: np.ndarray
