"""Shared pytest configuration.

Shape checks: before anything imports ``refimpl``, jaxtyping's import hook is installed for
``refimpl.core`` and ``refimpl.algorithms``, so that every function and dataclass of those
modules is wrapped in ``jaxtyped(typechecker=beartype)`` for the whole test session: a tensor
whose shape or dtype contradicts its annotation (``Float[Tensor, "B T"]``, ...) fails the call.
Outside the tests nothing is wrapped (``tests/spec/test_shapes.py`` checks both; see
docs/spec.md, "Shape-typed math").

- ``is_pep484_tower=True``: an ``int`` passes where ``float`` is annotated (``Config(kl_coef=0)``,
  ``eps=1``), as PEP 484 reads it; without it beartype rejects every integer literal.
- A failed check raises :class:`ShapeCheckError`, jaxtyping's ``TypeCheckError`` that is also a
  ``ValueError``: the public functions' contract is "a bad argument raises ``ValueError``
  naming it", and the tests that pass a wrong-shaped tensor on purpose rely on it. jaxtyping's
  message names the argument ("... typechecking parameter 'logp'").

Hypothesis profiles: ``ci`` (derandomized, bounded examples, no deadline, so a slow CI core
never turns into a flaky failure) and ``thorough`` (1000 random examples per test; a failure
prints the blob that reproduces it). Select with ``HYPOTHESIS_PROFILE=thorough`` (``make
test-thorough`` runs the spec that way); the default is ``ci``.
"""

import os
import sys

import jaxtyping
import jaxtyping._decorator

#: The modules whose annotations are checked, and the checker (a string: the hook compiles it
#: into the decorator it adds to every function and class of those modules).
SHAPE_CHECKED = ("refimpl.core", "refimpl.algorithms")
TYPECHECKER = "beartype.beartype(conf=beartype.BeartypeConf(is_pep484_tower=True))"


class ShapeCheckError(jaxtyping.TypeCheckError, ValueError):
    """A run-time shape/dtype check failed (a ``TypeError`` and a ``ValueError``)."""


assert not any(m == "refimpl" or m.startswith("refimpl.") for m in sys.modules), (
    "refimpl was imported before tests/conftest.py could install the shape checks"
)
# jaxtyping raises the class it finds under this name in its decorator module.
jaxtyping._decorator.TypeCheckError = ShapeCheckError
jaxtyping.install_import_hook(list(SHAPE_CHECKED), TYPECHECKER)

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "thorough",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
