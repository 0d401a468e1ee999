"""The bottom of the house, below the contract: the one check of a value against its type
annotation (``typecheck``), which an algorithm's ``Config`` (``refimpl.contract``) and a run's
settings (``refimpl.settings``) both read. It imports nothing of ours."""
