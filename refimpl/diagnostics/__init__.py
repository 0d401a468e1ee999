"""The diagnostics of a run: measurements that explain it and never change what it trains.

metrics              pass@k, Cov(logp, A) and entropy percentiles
entropy_attribution  the first-order prediction of a step's entropy change, split over
                     token classes, and the correlations read back from a run's logs
observers            the Observer interface through which the Trainer's step shows each
                     stage to them, and the run's default observers
"""
