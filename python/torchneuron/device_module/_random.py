"""Random number generation: one generator per core, separate from the CPU's."""
import torch

from .. import _C
from ._device import _checked_index, device_count

# The functions of torch.neuron's RNG interface (compile/registration.py keeps
# Dynamo from tracing into them).
__all__ = ["manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
           "set_rng_state", "get_rng_state_all", "set_rng_state_all"]


def _generator(device=None, op: str = "default_generators") -> torch.Generator:
    return _C._default_generator(_checked_index(device, op))


class _DefaultGenerators:
    def __getitem__(self, index):
        return _generator(index)

    def __len__(self):
        return device_count()

    def __iter__(self):
        return (_generator(i) for i in range(device_count()))


default_generators = _DefaultGenerators()


def manual_seed(seed: int) -> None:
    """Seeds the current core's generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    s = _generator(0).seed() if device_count() else None
    for i in range(1, device_count()):
        _generator(i).manual_seed(s)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device="neuron") -> torch.Tensor:
    return _generator(device, "get_rng_state").get_state()


def set_rng_state(new_state: torch.Tensor, device="neuron") -> None:
    _generator(device, "set_rng_state").set_state(new_state.clone())


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
