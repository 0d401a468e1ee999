"""Print a few problems of every task with their reference solutions and rewards.

Run with ``python -m toy_envs.show_tasks``. For each task: three sampled problems, the reference
completion (what the warm start imitates) and its reward (1.0), then a wrong completion, its
final answer off by one, and its reward (0.0).
"""

from __future__ import annotations

from toy_envs.tasks import TASK_NAMES, Problem, Task, get_task
from toy_envs.tokenizer import TOKENIZER


def wrong_completion(task: Task, problem: Problem) -> str:
    """The reference completion with its final answer changed, so that it must score 0."""
    if task.name == "countdown":
        # The reference uses every number once, so an extra literal is never allowed: 0.
        return task.reference_solution(problem) + "+1"
    reference = task.reference_solution(problem)
    head, marker, _ = reference.rpartition("#")
    return f"{head}{marker}{problem.answer + 1}"


def main(seed: int = 0, per_task: int = 3) -> None:
    print(f"tokenizer: {TOKENIZER!r}")
    for name in TASK_NAMES:
        task = get_task(name)
        print(
            f"\n== {name}: {task!r}\n"
            f"   max_prompt_tokens={task.max_prompt_tokens} (with <bos>), "
            f"max_new_tokens={task.max_new_tokens} (with <eos>)"
        )
        for problem in task.sample(per_task, seed):
            reference = task.reference_solution(problem)
            wrong = wrong_completion(task, problem)
            print(
                f"   {problem.prompt:<14} reference {reference!r:<22} "
                f"reward {task.reward(problem, reference):.1f}   "
                f"wrong {wrong!r:<22} reward {task.reward(problem, wrong):.1f}"
            )


if __name__ == "__main__":
    main()
