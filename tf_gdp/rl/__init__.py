"""Reinforcement learning for placement: environment, PPO and the workflows.

    task = rl.PlacementTask(graph, topology)
    result = rl.pretrain(tasks, budget=rl.Budget(seconds=600), root_dir=d)
    result = rl.finetune(d + "/policy", task, budget=rl.Budget(evaluations=2000))
    shot = rl.zeroshot(d + "/policy", task, samples=16)

Modules: `placement_task` (what is placed: a graph on a topology),
`environment` (the one-step tf-agents bandit and its reward backends),
`observations` (its padded observation specs), `rewards` (the reward, its
reference, evaluation records), `actor_network` (tf-agents actor and critic
around the policy), `ppo` (the PPO agent), `trainer` (the training loop and
checkpoints), `train_config` (its settings, PPO's and budgets), `train_result`
(what a run ends with), `search_targets` (the best search placement per task,
cached) and `imitation` (the supervised phase that fits the policy to them
before PPO), `experience` (sampling and PPO's rows), `exploration` (pipeline
pushes, entropy floor), `run_dir` (a training root directory and its lock),
`policy_io` (policies on disk), `zero_shot` (one forward pass, no tf-agents),
`workflows` (pretrain / finetune), `tasks` (placement tasks from graph specs),
`outputs` (best placements: placement files and checkpoint records),
`robust_objective` (rewards by the median over perturbed cost models),
`tf_agents_import` (tf-agents imported quietly).

Importing this package imports TensorFlow; the names of training (the
environment, PPO, the trainer, pretrain and finetune) are loaded on first use
(PEP 562), which imports tf-agents only then.
"""

from grappler_bridge import package_api as _package_api

from tf_gdp.rl.placement_task import PlacementTask
from tf_gdp.rl.policy_io import load_policy
from tf_gdp.rl.policy_io import save_policy
from tf_gdp.rl.rewards import INVALID_PENALTY
from tf_gdp.rl.rewards import Best
from tf_gdp.rl.rewards import Evaluation
from tf_gdp.rl.rewards import Reference
from tf_gdp.rl.rewards import placement_reward
from tf_gdp.rl.train_config import Budget
from tf_gdp.rl.train_config import PpoConfig
from tf_gdp.rl.train_config import TrainConfig
from tf_gdp.rl.train_result import TrainResult
from tf_gdp.rl.zero_shot import ZeroShotResult
from tf_gdp.rl.zero_shot import zeroshot

# Public names that need tf-agents: name -> defining module.
_LAZY = {
    "BACKENDS": "tf_gdp.rl.environment",
    "PlacementEnv": "tf_gdp.rl.environment",
    "Trainer": "tf_gdp.rl.trainer",
    "finetune": "tf_gdp.rl.workflows",
    "pretrain": "tf_gdp.rl.workflows",
}

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
    modules=("environment", "exploration", "outputs", "placement_task",
             "policy_io", "ppo", "rewards", "train_config", "trainer",
             "workflows", "zero_shot"),
    lazy=_LAZY)
