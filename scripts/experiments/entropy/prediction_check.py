"""How well a run's first-order prediction tracks its measured entropy change, and whether its
attribution adds up: the figures issue readers check against docs/entropy_mechanism.md.

    .venv/bin/refimpl train --algo grpo --task countdown --steps 40 --threads 1 --diag-every 10
    .venv/bin/python scripts/experiments/entropy/prediction_check.py runs/countdown-grpo-s0 [RUN]

For each run directory it prints, over the steps that logged both: Pearson's r of
``entropy_change`` against ``entropy_change_pred`` (raw and after the run's running-mean
trend), the slope of measured on predicted, the ``entropy_attr/<class>`` keys logged, the
number of attributed steps, and the largest relative gap between the classes' sum and the
prediction on those steps.
"""

from __future__ import annotations

import sys

from refimpl.diagnostics.entropy_attribution import attribution_gap, attribution_keys, correlations
from refimpl.runs.runlog import read_metrics


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for run in argv:
        records = read_metrics(run)
        c = correlations([records], "entropy_change_pred")
        keys = attribution_keys(records)
        attributed = sum(1 for r in records if keys and keys[0] in r)
        print(
            f"{run}: {c['steps']} steps, r(pred, measured) = {c['r']:+.3f} "
            f"(detrended {c['r_detrended']:+.3f}), slope {c['slope']:+.3f}; "
            f"{len(keys)} attribution keys ({', '.join(k.split('/', 1)[1] for k in keys)}) "
            f"on {attributed} steps, largest |Σ classes − pred| / |pred| = "
            f"{attribution_gap(records):.2e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
