"""Every builder's options in its signature: its own hyperparameters, then FedAvg's shared
options (beta, delta_from, clipping, weight decay, the optimizers, the runtime), so that
`help(scaffold)` shows what it really takes and its defaults, and an option it does not take
is refused naming the builder, the option and the ones it takes.
"""
import functools
import inspect

__all__ = ["SERVER_STEP", "shares_fedavg_options", "check_options"]

# FedAvg's keyword arguments a builder never shares: the plug-in it is built from
_INTERNAL = ("correction",)
# a server that replaces w (the FedDyn family) takes no step: no step size, no optimizer, and
# no choice of the update it would step along
SERVER_STEP = ("server_lr", "server_optimizer", "delta_from")


def shares_fedavg_options(fedavg, *, server_step: bool = True, server_optimizer: bool = True,
                          refused: tuple = ()):
    """Decorator for a builder `name(loss_fn, *, own hyperparameters, **options)` that passes
    **options on to `fedavg`. server_step=False: the server replaces w instead of stepping
    along the mean update (the FedDyn family), so server_lr, server_optimizer and
    delta_from are not options; server_optimizer=False: the server optimizer is the method's
    definition (FedAdam); refused: any other of FedAvg's options the method fixes (FedACG's
    offset rule)."""
    refused = set(_INTERNAL) | set(refused)
    if not server_step:
        refused.update(SERVER_STEP)
    if not server_optimizer:
        refused.add("server_optimizer")

    def wrap(builder):
        own = inspect.signature(builder).parameters
        shared = [p for name, p in inspect.signature(fedavg).parameters.items()
                  if p.kind is p.KEYWORD_ONLY and name not in own and name not in refused]
        signature = inspect.Signature(
            [p for p in own.values() if p.kind is not p.VAR_KEYWORD] + shared)
        allowed = tuple(name for name in signature.parameters if name != "loss_fn")

        @functools.wraps(builder)
        def checked(loss_fn, **options):
            check_options(builder.__name__, options, allowed)
            return builder(loss_fn, **options)

        checked.__signature__ = signature
        return checked

    return wrap


def check_options(name: str, options: dict, allowed) -> None:
    """ValueError naming the algorithm, each option it does not take and the ones it does."""
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}={options[unknown[0]]!r}: {name} takes no option "
                         f"{', '.join(unknown)}; its options: {', '.join(sorted(allowed))}")
