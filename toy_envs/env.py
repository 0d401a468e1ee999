"""A gymnasium view of a task: the policy writes the completion one token per step.

Why an environment at all, when the trainer calls ``task.score`` on whole completions? So
that the tasks can be poked at with standard RL tooling (``check_env``, wrappers, vector envs)
and so that the token-level MDP the algorithms reason about is explicit:

* state  = the text so far: ``<bos>`` + prompt + the completion tokens written so far;
* action = the next token id, ``Discrete(TOKENIZER.vocab_size)``;
* reward = 0 on every step but the last; on the last step, the task's outcome reward of the
  completion (``task.reward(problem, TOKENIZER.decode(completion_ids))``);
* the episode **terminates** when the action is ``<eos>`` and **truncates** when the
  completion reaches ``max_new_tokens`` tokens without one. Truncation also pays the reward of
  the completion so far, so that the return always equals ``task.score`` of the decoded
  completion, exactly what the trainer computes for a truncated sample.

Tokens other than ``<eos>`` are appended as they are; ``<pad>``/``<bos>`` emitted by the policy
vanish when the completion is decoded (``skip_special=True``), as in the trainer.

Observation (a ``Dict`` space, so ``check_env`` and vector envs handle it):

* ``"tokens"``: int64 ``[max_prompt_tokens + max_new_tokens]``, the ids so far followed by
  ``pad_id``;
* ``"length"``: how many of those are real tokens (an int in ``[0, max_len]``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from toy_envs.tasks import DEFAULT_TASK, Problem, Task, get_task
from toy_envs.tokenizer import TOKENIZER

#: The largest completion budget an env takes (``max_new_tokens``), as the CLI bounds its size
#: flags before anything is allocated: the env holds three ``int64`` arrays of the episode's
#: length (its tokens, the observation space's bounds) and copies the tokens at every step, so
#: an episode costs O(length²): 4096 tokens copy about 0.1 GB per episode, 10⁹ would allocate
#: 24 GB at once. The tasks' answers need a few dozen tokens (``task.max_new_tokens``).
MAX_NEW_TOKENS = 4096


class TextArithmeticEnv(gym.Env[dict[str, Any], int]):
    """One episode = one problem; one step = one completion token.

    Args:
        task: a :class:`~toy_envs.tasks.Task` instance or a task name (see ``TASK_NAMES``).
        max_new_tokens: completion budget in tokens, ``<eos>`` included (default: the task's;
            at most ``MAX_NEW_TOKENS``).
        render_mode: ``None``, ``"ansi"`` (``render()`` returns the text) or ``"human"``
            (``render()`` prints it).
        task_kwargs: knobs passed to ``get_task`` when ``task`` is a name, e.g.
            ``gymnasium.make("toy_envs/Chain-v0", task_kwargs={"num_ops": 2})``.

    ``reset(seed=s)`` draws the problem from the env's seeded generator, so the same seed gives
    the same problem. ``reset(options={"problem": p})`` poses a given :class:`Problem` instead.
    ``info`` carries ``prompt`` and ``answer`` after reset and, at the end of an episode, the
    decoded ``completion`` and ``success`` (reward == 1).
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(
        self,
        task: Task | str = DEFAULT_TASK,
        max_new_tokens: int | None = None,
        render_mode: str | None = None,
        task_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if isinstance(task, str):
            task = get_task(task, **(task_kwargs or {}))
        elif not isinstance(task, Task):
            raise ValueError(f"task must be a Task or a task name, got {type(task).__name__}")
        elif task_kwargs:
            raise ValueError("task_kwargs only applies when task is given by name")
        if max_new_tokens is None:
            max_new_tokens = task.max_new_tokens
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
            raise ValueError(f"max_new_tokens must be an int, got {max_new_tokens!r}")
        if not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
            raise ValueError(
                f"max_new_tokens must be in [1, {MAX_NEW_TOKENS}] (toy_envs.env.MAX_NEW_TOKENS), "
                f"got {max_new_tokens}"
            )
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be None or one of {self.metadata['render_modes']}, "
                f"got {render_mode!r}"
            )
        self.task = task
        self.max_new_tokens = max_new_tokens
        self.render_mode = render_mode
        self.max_len = task.max_prompt_tokens + max_new_tokens

        self.action_space = spaces.Discrete(TOKENIZER.vocab_size)
        self.observation_space = spaces.Dict(
            {
                "tokens": spaces.Box(
                    low=0, high=TOKENIZER.vocab_size - 1, shape=(self.max_len,), dtype=np.int64
                ),
                "length": spaces.Discrete(self.max_len + 1),
            }
        )

        self.problem: Problem | None = None
        self._tokens = np.full(self.max_len, TOKENIZER.pad_id, dtype=np.int64)
        self._length = 0
        self._prompt_length = 0
        self._done = True

    # ------------------------------------------------------------------ helpers
    @property
    def completion_ids(self) -> list[int]:
        """The completion tokens written so far (``<eos>`` included once written)."""
        return self._tokens[self._prompt_length : self._length].tolist()

    @property
    def completion(self) -> str:
        """The completion text the verifier sees: decoded, specials skipped."""
        return TOKENIZER.decode(self.completion_ids)

    def _observation(self) -> dict[str, Any]:
        # Copies, so that an observation a caller keeps is not changed by later steps.
        return {"tokens": self._tokens.copy(), "length": self._length}

    # ------------------------------------------------------------------ gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        problem = (options or {}).get("problem")
        if problem is None:
            problem = self.task.sample(1, self.np_random)[0]
        elif not isinstance(problem, Problem):
            raise ValueError(f"options['problem'] must be a Problem, got {type(problem)}")
        prompt_ids = TOKENIZER.encode(problem.prompt, add_bos=True)
        if len(prompt_ids) > self.task.max_prompt_tokens:
            raise ValueError(
                f"prompt of {len(prompt_ids)} tokens exceeds the task's max_prompt_tokens "
                f"({self.task.max_prompt_tokens}): {problem.prompt!r}"
            )
        self.problem = problem
        self._tokens.fill(TOKENIZER.pad_id)
        self._tokens[: len(prompt_ids)] = prompt_ids
        self._length = self._prompt_length = len(prompt_ids)
        self._done = False
        return self._observation(), {"prompt": problem.prompt, "answer": problem.answer}

    def step(self, action: int) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self._done or self.problem is None:
            raise RuntimeError("step() called on a finished or never-reset episode; call reset()")
        if not self.action_space.contains(action):
            raise ValueError(
                f"action must be a token id in [0, {TOKENIZER.vocab_size}), got {action!r}"
            )
        self._tokens[self._length] = int(action)
        self._length += 1

        terminated = int(action) == TOKENIZER.eos_id
        truncated = not terminated and self._length - self._prompt_length >= self.max_new_tokens
        reward, info = 0.0, {}
        if terminated or truncated:
            self._done = True
            completion = self.completion
            reward = float(self.task.reward(self.problem, completion))
            info = {"completion": completion, "success": reward == 1.0}
        return self._observation(), reward, terminated, truncated, info

    def render(self) -> str | None:
        if self.problem is None:
            text = "<no episode: call reset()>"
        else:
            text = self.problem.prompt + self.completion
        if self.render_mode == "human":
            print(text)
            return None
        if self.render_mode == "ansi":
            return text
        return None
