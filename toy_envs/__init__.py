"""Toy sparse-reward arithmetic tasks for RL on tiny language models.

numpy + gymnasium only: this package knows nothing of torch or ``refimpl``.

* :mod:`toy_envs.tokenizer`: the character vocabulary every task shares (``TOKENIZER``);
* :mod:`toy_envs.tasks`: generators and verifiers (``get_task("chain")``);
* :mod:`toy_envs.expression`: the safe integer parser the verifiers use (no ``eval``);
* :mod:`toy_envs.env`: a gymnasium environment per task, one token per step.

Importing the package registers ``toy_envs/Addition-v0``, ``toy_envs/Chain-v0``,
``toy_envs/Multiplication-v0`` and ``toy_envs/Countdown-v0`` with gymnasium.
"""

import gymnasium

from toy_envs.env import TextArithmeticEnv
from toy_envs.tasks import DEFAULT_TASK, TASK_NAMES, TASKS, Problem, Task, get_task
from toy_envs.tokenizer import TOKENIZER, CharTokenizer

#: gymnasium id for each task name.
ENV_IDS: dict[str, str] = {
    "addition": "toy_envs/Addition-v0",
    "chain": "toy_envs/Chain-v0",
    "multiplication": "toy_envs/Multiplication-v0",
    "countdown": "toy_envs/Countdown-v0",
}

for _task_name, _env_id in ENV_IDS.items():
    # Re-importing (e.g. importlib.reload) must not re-register: gymnasium warns on that.
    if _env_id not in gymnasium.registry:
        gymnasium.register(
            id=_env_id,
            entry_point="toy_envs.env:TextArithmeticEnv",
            kwargs={"task": _task_name},
        )

__all__ = [
    "DEFAULT_TASK",
    "ENV_IDS",
    "TASKS",
    "TASK_NAMES",
    "TOKENIZER",
    "CharTokenizer",
    "Problem",
    "Task",
    "TextArithmeticEnv",
    "get_task",
]
