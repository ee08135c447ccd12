"""Reinforcement learning for placement: environment, PPO and the workflows.

    task = rl.PlacementTask(graph, topology)
    result = rl.pretrain(tasks, budget=rl.Budget(seconds=600), root_dir=d)
    result = rl.finetune(d + "/policy", task, budget=rl.Budget(evaluations=2000))
    shot = rl.zeroshot(d + "/policy", task, samples=16)

Modules: `environment` (the one-step tf-agents bandit and its reward
backends), `observations` (its padded observation specs), `rewards` (the
reward, its reference, evaluation records), `actor_network` (tf-agents
actor and critic around the policy), `ppo` (the PPO agent), `trainer` (the
training loop and checkpoints), `train_config` (its settings and budgets),
`train_result` (what a run ends with), `search_targets` (the best search
placement per task, cached) and `imitation` (the supervised phase that fits
the policy to them before PPO), `experience` (sampling and PPO's rows), `exploration` (pipeline pushes,
entropy floor), `run_dir` (a training root directory and its lock),
`policy_io` (policies on disk), `workflows` (pretrain / finetune /
zeroshot), `tasks` (placement tasks from graph specs), `outputs` (best placements:
placement files and checkpoint records), `robust_objective` (rewards by the
median over perturbed cost models), `tf_agents_import` (tf-agents imported
quietly).
Importing this package imports TensorFlow.
"""

from grappler_bridge import package_api as _package_api

from tf_gdp.rl.environment import BACKENDS
from tf_gdp.rl.environment import PlacementEnv
from tf_gdp.rl.environment import PlacementTask
from tf_gdp.rl.policy_io import load_policy
from tf_gdp.rl.policy_io import save_policy
from tf_gdp.rl.ppo import PpoConfig
from tf_gdp.rl.rewards import INVALID_PENALTY
from tf_gdp.rl.rewards import Best
from tf_gdp.rl.rewards import Evaluation
from tf_gdp.rl.rewards import Reference
from tf_gdp.rl.rewards import placement_reward
from tf_gdp.rl.train_config import Budget
from tf_gdp.rl.train_config import TrainConfig
from tf_gdp.rl.trainer import Trainer
from tf_gdp.rl.train_result import TrainResult
from tf_gdp.rl.workflows import ZeroShotResult
from tf_gdp.rl.workflows import finetune
from tf_gdp.rl.workflows import pretrain
from tf_gdp.rl.workflows import zeroshot

__all__ = [
    "BACKENDS",
    "Best",
    "Budget",
    "Evaluation",
    "INVALID_PENALTY",
    "PlacementEnv",
    "PlacementTask",
    "PpoConfig",
    "Reference",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "ZeroShotResult",
    "finetune",
    "load_policy",
    "placement_reward",
    "pretrain",
    "save_policy",
    "zeroshot",
]

_package_api.install(
    globals(),
    modules=("environment", "exploration", "outputs", "policy_io", "ppo", "rewards",
             "train_config", "trainer", "workflows"))
