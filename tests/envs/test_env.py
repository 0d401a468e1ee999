"""The gymnasium environments: API conformance, rewards only at the end, equal to task.score."""

from __future__ import annotations

import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import toy_envs
from toy_envs import ENV_IDS, TASK_NAMES, TOKENIZER, TextArithmeticEnv, get_task


def make(env_id: str, **kwargs: object) -> TextArithmeticEnv:
    return gymnasium.make(env_id, **kwargs).unwrapped  # type: ignore[return-value]


def test_every_task_is_registered() -> None:
    assert set(ENV_IDS) == set(TASK_NAMES)
    assert set(ENV_IDS.values()) == {
        "toy_envs/Addition-v0",
        "toy_envs/Chain-v0",
        "toy_envs/Multiplication-v0",
        "toy_envs/Countdown-v0",
    }
    for name, env_id in ENV_IDS.items():
        assert make(env_id).task.name == name


@pytest.mark.parametrize("env_id", ENV_IDS.values())
def test_check_env(env_id: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # check_env's advisory warnings are not failures
        check_env(make(env_id))


@pytest.mark.parametrize("env_id", ENV_IDS.values())
def test_random_policy_earns_about_zero(env_id: str) -> None:
    """Uniform random tokens almost never write a right answer, and pay only at the end."""
    env = make(env_id)
    env.action_space.seed(0)
    returns = []
    for episode in range(50):
        env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
            if not done:
                assert reward == 0.0
            total += reward
        returns.append(total)
    assert np.mean(returns) <= 0.1


@pytest.mark.parametrize("env_id", ENV_IDS.values())
def test_replaying_the_reference_earns_one_at_the_end(env_id: str) -> None:
    env = make(env_id)
    for seed in range(20):
        obs, info = env.reset(seed=seed)
        problem = env.problem
        assert info["prompt"] == problem.prompt
        prompt_ids = TOKENIZER.encode(problem.prompt, add_bos=True)
        assert obs["length"] == len(prompt_ids)
        assert obs["tokens"][: len(prompt_ids)].tolist() == prompt_ids
        actions = TOKENIZER.encode(env.task.reference_solution(problem), add_eos=True)
        for i, action in enumerate(actions):
            obs, reward, terminated, truncated, info = env.step(action)
            assert obs in env.observation_space
            assert obs["length"] == len(prompt_ids) + i + 1
            last = i == len(actions) - 1
            assert terminated == last and not truncated
            assert reward == (1.0 if last else 0.0)
        assert info["success"] and info["completion"] == env.task.reference_solution(problem)


def test_truncation_at_the_budget() -> None:
    """No <eos> within max_new_tokens: truncated (not terminated) on exactly the last step."""
    for budget in (None, 3):
        env = make("toy_envs/Chain-v0", max_new_tokens=budget)
        expected = budget or env.task.max_new_tokens
        env.reset(seed=0)
        one = TOKENIZER.stoi["1"]
        for step in range(1, expected + 1):
            _, reward, terminated, truncated, info = env.step(one)
            assert not terminated
            assert truncated == (step == expected)
        assert info["completion"] == "1" * expected
        assert reward == env.task.reward(env.problem, "1" * expected)
        with pytest.raises(RuntimeError, match="reset"):
            env.step(one)


def test_truncation_pays_the_reward_of_the_completion_so_far() -> None:
    """A right answer cut off before its <eos> still earns 1 (the documented choice)."""
    task = get_task("chain")
    env = TextArithmeticEnv(task)
    env.reset(seed=3)
    reference = task.reference_solution(env.problem)
    env = TextArithmeticEnv(task, max_new_tokens=len(reference))
    env.reset(seed=3)
    for action in TOKENIZER.encode(reference):
        _, reward, terminated, truncated, _ = env.step(action)
    assert truncated and not terminated and reward == 1.0


@pytest.mark.parametrize("name", TASK_NAMES)
def test_env_reward_equals_task_score(name: str) -> None:
    """Random mixes of reference tokens and random tokens: the env's return == task.score."""
    env = TextArithmeticEnv(name)
    rng = np.random.default_rng(0)
    problems, completions, returns = [], [], []
    for seed in range(60):
        env.reset(seed=seed)
        reference = TOKENIZER.encode(env.task.reference_solution(env.problem), add_eos=True)
        keep = int(rng.integers(0, len(reference) + 1))
        total, done, step = 0.0, False, 0
        while not done:
            if step < keep:
                action = reference[step]
            else:
                action = int(rng.integers(TOKENIZER.vocab_size))
            _, reward, terminated, truncated, _ = env.step(action)
            total, done, step = total + reward, terminated or truncated, step + 1
        problems.append(env.problem)
        completions.append(TOKENIZER.decode(env.completion_ids))
        returns.append(total)
    scores = env.task.score(problems, completions)
    assert np.array_equal(np.asarray(returns, dtype=np.float32), scores)
    assert 0 < scores.sum() < len(scores)  # both outcomes occurred


def test_reset_is_deterministic_per_seed() -> None:
    env = make("toy_envs/Countdown-v0")
    prompts = []
    for seed in (0, 0, 1, 2):
        obs, info = env.reset(seed=seed)
        prompts.append(info["prompt"])
    assert prompts[0] == prompts[1]
    assert len(set(prompts)) == 3
    problem = get_task("countdown").sample(1, 99)[0]
    _, info = env.reset(options={"problem": problem})
    assert env.problem == problem and info["prompt"] == problem.prompt


def test_make_vec_sync() -> None:
    envs = gymnasium.make_vec("toy_envs/Chain-v0", num_envs=2, vectorization_mode="sync")
    try:
        obs, _ = envs.reset(seed=0)
        max_len = envs.get_attr("max_len")[0]
        assert obs["tokens"].shape == (2, max_len) and obs["length"].shape == (2,)
        envs.action_space.seed(0)
        finished = 0
        for _ in range(3 * max_len):
            obs, rewards, terminated, truncated, _ = envs.step(envs.action_space.sample())
            assert rewards.shape == (2,)
            finished += int(np.sum(terminated | truncated))
        assert finished >= 2  # episodes ended and were auto-reset
    finally:
        envs.close()


def test_make_with_task_kwargs_and_validation() -> None:
    env = make("toy_envs/Chain-v0", task_kwargs={"num_ops": 2})
    _, info = env.reset(seed=0)
    assert sum(info["prompt"].count(op) for op in "+-") == 2
    with pytest.raises(ValueError):
        TextArithmeticEnv("chain", max_new_tokens=0)
    with pytest.raises(ValueError):
        TextArithmeticEnv("nope")
    with pytest.raises(ValueError):
        TextArithmeticEnv(get_task("chain"), task_kwargs={"num_ops": 2})
    env = TextArithmeticEnv("addition")
    with pytest.raises(RuntimeError):
        env.step(3)  # before reset
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action"):
        env.step(TOKENIZER.vocab_size)


def test_the_completion_budget_is_bounded_before_anything_is_allocated() -> None:
    """The issue's bound 12: ``gymnasium.make("toy_envs/Chain-v0", max_new_tokens=10**9)``
    allocated until the kernel killed the process (24 GB). The env's size is bounded as the
    CLI bounds its flags: the bound itself works, one more is refused naming the argument."""
    from toy_envs.env import MAX_NEW_TOKENS

    for too_many in (MAX_NEW_TOKENS + 1, 10**9):
        with pytest.raises(
            ValueError, match=rf"^max_new_tokens must be in \[1, {MAX_NEW_TOKENS}\]"
        ):
            make("toy_envs/Chain-v0", max_new_tokens=too_many)
    env = make("toy_envs/Chain-v0", max_new_tokens=MAX_NEW_TOKENS)
    obs, _ = env.reset(seed=0)
    assert obs["tokens"].shape == (env.task.max_prompt_tokens + MAX_NEW_TOKENS,)


def test_render_ansi() -> None:
    env = TextArithmeticEnv("addition", render_mode="ansi")
    env.reset(seed=0)
    env.step(TOKENIZER.stoi["4"])
    assert env.render() == env.problem.prompt + "4"


def test_reimport_does_not_reregister() -> None:
    import importlib

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.reload(toy_envs)
    assert "toy_envs/Chain-v0" in gymnasium.registry
