"""Shared helpers: a linear-regression federation with partial participation, and the
experiment binary run as a subprocess or in-process on the embedded digits."""
import json
import os
import subprocess
import sys
import tempfile

# XLA:CPU compiles fast in every process of the suite: the suite compiles hundreds of small
# programs and runs each for milliseconds, so compiling is most of its time. Backend
# optimisation level 0; the elemental emitters instead of the MLIR fusion emitters (a small
# round's compile time halved) and one LLVM module per program instead of parallel codegen
# (~14 % less in the compile-heavy files): benchmarks/RESULTS.md, "Test suite". They change
# no semantics: results agree to float rounding, as between any two compilations that fuse
# differently (two programs that agree to the bit at the default options may not here:
# test_client_store.py compares a store's loop with its own); what users run is compiled at
# the defaults. A collective between the suite's CPU devices waits 600 s for a device thread
# that the busy test machine starves (XLA's default: abort the process after 40 s), as the
# binaries'.
TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false "
                  "--xla_cpu_parallel_codegen_split_count=1 "
                  "--xla_cpu_collective_call_terminate_timeout_seconds=600")


def xla_flags(devices: int) -> str:
    """XLA_FLAGS for a process of the suite with `devices` XLA CPU devices."""
    return f"--xla_force_host_platform_device_count={devices} {TEST_XLA_FLAGS}"


# two XLA CPU devices, so that sharded rounds can be compared with one-device rounds
os.environ.setdefault("XLA_FLAGS", xla_flags(2))
# one persistent compilation cache for the session's processes (xdist workers and the binaries
# they start inherit it): the suite compiles the same small rounds many times, and a cached
# executable is the same executable (keyed by the program, options and jax version)
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), "fedinit_jax_test_compile_cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fedinit_jax import RoundInput  # noqa: E402
from fedinit_jax.federated_round import divergence_all  # noqa: E402

jax.config.update("jax_enable_x64", False)
jax.config.update("jax_numpy_rank_promotion", "raise")  # no silent broadcasting

DIM = 3
NUM_CLIENTS = 5
ROUND_IDS = ([0, 2, 4], [1, 2, 3], [4, 0, 3])  # partial participation, N = 3 of C = 5
NUM_STEPS, BATCH = 4, 8


def linreg_loss(params, batch, key):
    """mean((x @ w + b - y)^2); the key is unused."""
    del key
    x, y = batch
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


STATEFUL_SERVERS = ("fedadam", "fedyogi", "fedavgm")  # server optimizers with state: RI needs `start`


def with_ri(name, beta=0.1) -> dict:
    """Builder options for `name` + RI: a stateful server (FedAdam, FedYogi) refuses
    Algorithm 1's `global` aggregation with RI, so it takes the authors' `start`."""
    return {"beta": beta, **({"delta_from": "start"} if name in STATEFUL_SERVERS else {})}


def ri_options(name, beta, delta_from) -> dict:
    """The builder options of `name` with RI `beta` and `delta_from` (a combination ri_cases
    yields): the FedDyn family takes no delta_from (its server replaces w)."""
    if "delta_from" not in algorithms_registry()[name].options:
        return {"beta": beta}
    return {"beta": beta, "delta_from": delta_from}


def ri_cases(cases, betas=(0.0, 0.1), delta_froms=("global", "start")) -> list:
    """pytest params (name, hparams, ref_kwargs, beta, delta_from) of `cases` crossed with
    the betas and delta_froms, the combinations that are refused or repeat another left out
    rather than skipped: `start` for the FedDyn family (its server replaces w: the same run
    as `global`), RI with `global` for a stateful server (test_algorithms.py::
    test_stateful_server_optimizer_...)."""
    out = []
    for name, hparams, ref_kwargs in cases:
        takes = "delta_from" in algorithms_registry()[name].options
        for beta in betas:
            for delta_from in delta_froms:
                if (not takes and delta_from == "start") or (
                        name in STATEFUL_SERVERS and beta and delta_from == "global"):
                    continue
                out.append(pytest.param(name, hparams, ref_kwargs, beta, delta_from,
                                        id=f"{name}-rho{hparams.get('rho', '')}-{beta}-"
                                           f"{delta_from}"))
    return out


def algorithms_registry():
    from fedinit_jax import algorithms

    return algorithms.REGISTRY


def counting(loss_fn):
    """(loss_fn that records each time JAX traces it, the list of records)."""
    traces = []

    def counted(params, batch, key):
        traces.append(1)
        return loss_fn(params, batch, key)

    return counted, traces


def flat(params):
    return np.concatenate([np.asarray(params["w"]), np.asarray(params["b"])[None]])


@pytest.fixture(scope="session")
def linreg_rounds():
    """Three rounds of heterogeneous client data: (ids, xs [N,K,B,d], ys [N,K,B], lr)."""
    rng = np.random.default_rng(0)
    true_w = rng.normal(size=(NUM_CLIENTS, DIM))  # every client its own optimum
    rounds = []
    for t, ids in enumerate(ROUND_IDS):
        xs = rng.normal(size=(len(ids), NUM_STEPS, BATCH, DIM)).astype(np.float32)
        ys = np.einsum("nkbd,nd->nkb", xs, true_w[ids]).astype(np.float32) + 0.5
        rounds.append((np.array(ids, np.int32), xs, ys, np.float32(0.05 * 0.998 ** t)))
    return rounds


@pytest.fixture(scope="session")
def theta0():
    return np.array([0.3, -0.2, 0.1, 0.05])


def params_from(theta):
    return {"w": jnp.asarray(theta[:-1], jnp.float32), "b": jnp.asarray(theta[-1], jnp.float32)}


# ------------------------------------------------------------------ running and comparing

def run(algo, theta0, rounds, seed=0):
    state = algo.init(params_from(theta0), num_clients=NUM_CLIENTS)
    history = []
    for t, (ids, xs, ys, lr) in enumerate(rounds):
        key = jax.random.fold_in(jax.random.key(seed), t)
        state, metrics = algo.apply(state, RoundInput(ids, (xs, ys), lr), key)
        history.append({k: float(v) for k, v in metrics.items()})
    return state, history


def assert_matches(state, history, ref):
    np.testing.assert_allclose(flat(state.params), ref["w"], rtol=1e-5, atol=1e-5)
    local = np.concatenate([np.asarray(state.ri_rows["w"]),
                            np.asarray(state.ri_rows["b"])[:, None]], axis=1)
    np.testing.assert_allclose(local, ref["w_local"], rtol=1e-5, atol=1e-5)
    for got, want in zip(history, ref["history"]):
        for name in ("train_loss", "divergence"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5,
                                       err_msg=name)
    # the paper's Delta^t reads every client: no round metric, taken from the final state
    np.testing.assert_allclose(float(divergence_all(state.ri_rows, state.params)),
                               ref["history"][-1]["divergence_all"], rtol=1e-5, atol=1e-5)


# (registry name, library hyperparameters, reference keyword arguments); strengths are
# large so that a 1% error in any correction term moves the result past the 1e-5 tolerance.
CASES = [
    ("fedadam", {"server_lr": 0.1}, {"server_lr": 0.1}),
    ("fedyogi", {"server_lr": 0.1}, {"server_lr": 0.1}),
    ("fedavgm", {"server_lr": 0.5, "momentum": 0.7}, {"server_lr": 0.5, "momentum": 0.7}),
    ("fedsam", {"rho": 0.5}, {"rho": 0.5}),
    ("scaffold", {}, {}),
    ("feddyn", {"lam": 1.0}, {"lam": 1.0}),
    ("fedcm", {"alpha": 0.5}, {"alpha": 0.5}),
    ("fedprox", {"mu": 1.0}, {"mu": 1.0}),
    ("fedspeed", {"rho": 0.5, "lam": 1.0}, {"rho": 0.5, "lam": 1.0}),
    ("fedspeed", {"rho": 0.0, "lam": 1.0}, {"rho": 0.0, "lam": 1.0}),
    ("fedgamma", {"rho": 0.5}, {"rho": 0.5}),
    ("fedgamma", {"rho": 0.0}, {"rho": 0.0}),
    ("mofedsam", {"rho": 0.5, "alpha": 0.5}, {"rho": 0.5, "alpha": 0.5}),
    ("mofedsam", {"rho": 0.0, "alpha": 0.5}, {"rho": 0.0, "alpha": 0.5}),
    ("fedsmoo", {"rho": 0.5, "lam": 1.0}, {"rho": 0.5, "lam": 1.0}),
    ("fedsmoo", {"rho": 0.0, "lam": 1.0}, {"rho": 0.0, "lam": 1.0}),
]


# every algorithm's own state, read by field name: (server state, per-client state) parts
STATE_PARTS = {
    "scaffold": {"c": lambda s: s.server_state.c, "c_i": lambda s: s.client_state.c_i},
    "fedgamma": {"c": lambda s: s.server_state.base.c, "c_i": lambda s: s.client_state.base.c_i},
    "feddyn": {"h_i": lambda s: s.client_state.h},
    "fedspeed": {"h_i": lambda s: s.client_state.base.h},
    "fedcm": {"d": lambda s: s.server_state.d},
    "mofedsam": {"d": lambda s: s.server_state.base.d},
    "fedsmoo": {"s": lambda s: s.server_state.extra.s, "h_i": lambda s: s.client_state.base.h,
                "mu_i": lambda s: s.client_state.extra.mu},
}


def assert_states_match(name, state, ref):
    """Each state the algorithm keeps equals the numpy reference's (c, c_i, h_i, d, s, mu_i)."""
    for key, part in STATE_PARTS.get(name, {}).items():
        got = stacked(part(state)) if key.endswith("_i") else flat(part(state))
        np.testing.assert_allclose(got, ref[key], atol=1e-5, rtol=1e-5, err_msg=key)


def stacked(params):
    """[C, d+1] rows of a stacked {'w', 'b'} pytree."""
    return np.concatenate([np.asarray(params["w"]), np.asarray(params["b"])[:, None]], axis=1)


# ------------------------------------------------------------------ the experiment binary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMING = ("train_seconds", "eval_seconds")
TINY = ["--config.rounds=3", "--config.num_clients=8", "--config.participation=0.5",
        "--config.local_epochs=1", "--config.eval_every=2", "--config.checkpoint_every=1"]


def train(workdir, *overrides, wait=True, env=None):
    cmd = [sys.executable, "-m", "experiments.train", "--config",
           "experiments/configs/default.py", f"--workdir={workdir}", *overrides]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})}
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


# Runs `python -m MODULE ARGV...` once per argv (a JSON list on stdin), each in a child forked
# from this interpreter after it imported the binaries' dependencies once: the module itself
# is imported in the child, as `-m` does (its flags read sys.argv when they are defined).
_FORKED_BINARY = """
import json, os, runpy, sys, tempfile
import absl.app, jax, ml_collections.config_flags, fedinit_jax.experiment  # noqa: F401
module, argvs = json.load(sys.stdin)
results = []
for argv in argvs:
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        pid = os.fork()
        if pid == 0:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            sys.argv = [module, *argv]
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as stop:  # as the interpreter reads sys.exit's argument
                code = 0 if stop.code is None else stop.code
                if not isinstance(code, int):
                    print(code, file=sys.stderr)
                    code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        out.seek(0)
        err.seek(0)
        results.append([code, out.read(), err.read()])
print(json.dumps(results))
"""


def binary_runs(module, argvs, timeout=300):
    """[(exit code, stdout, stderr)] of `python -m module *argv` for each argv in `argvs`, run
    in the repository root from one interpreter that imports the dependencies once (a
    subprocess per argv pays ~1.5 s of imports each)."""
    done = subprocess.run([sys.executable, "-c", _FORKED_BINARY], cwd=ROOT, text=True,
                          input=json.dumps([module, argvs]), capture_output=True,
                          timeout=timeout, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr
    return [tuple(r) for r in json.loads(done.stdout)]


def rows(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def without_timing(rs):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rs]


def quiet_config(**changes):
    """The default config (digits, MLP) shrunk to TINY's size, as a dict for simulation.run."""
    from experiments.configs import default

    return {**default.get_config().to_dict(), "rounds": 4, "num_clients": 8,
            "participation": 0.5, "local_epochs": 1, "eval_every": 2, "checkpoint_every": 1,
            **changes}


QUIET = {"log": lambda line: None, "progress": False}  # simulation.run without output


def planned_run(config, workdir, **options):
    """simulation.run of experiment.plan(config) in `workdir` (its rows)."""
    from fedinit_jax import experiment
    from fedinit_jax.experiment import simulation

    return simulation.run(experiment.plan(config), str(workdir), **options)


class InjectedFault(Exception):
    """Raised by fault_then_resume's fault callback: the run dies there."""


def fault_then_resume(config, workdir, point):
    """simulation.run of `config` killed at `point` ("<fault point>:<round>", in-process: the
    loop's fault callback raises), then the same run again, which resumes."""
    from fedinit_jax import experiment
    from fedinit_jax.experiment import simulation

    where, at = point.split(":")

    def fault(name, rounds_done):
        if (name, rounds_done) == (where, int(at)):
            raise InjectedFault(point)

    with pytest.raises(InjectedFault):
        simulation.run(experiment.plan(config), str(workdir), fault=fault, **QUIET)
    simulation.run(experiment.plan(config), str(workdir), **QUIET)


# ------------------------------------------------------------------ Shakespeare

PLAY = """THE TRAGEDY OF TESTING

by Nobody


DRAMATIS PERSONAE

ALPHA, a King
BETA, his Fool


ACT I.

SCENE I. A room.

[Enter Alpha and Beta,
with attendants.]

ALPHA.
Good morrow, fool.  How fares the day?
[Aside] It rains.

Beta.
Well, my liege; the day fares well,
and so do I.

ALPHA.
Then sing.
[Exit Beta [and attendants.]

GAMMA
One line, and no more.

ACT II.

SCENE I. Another room.

BETA.
I sing: hey, ho!

ALPHA.
Enough.

BETA.
As you will.

ALPHA.
A last word, and a last line.
"""


def write_plays(folder, count):
    """`count` copies of PLAY (their kings renamed, so each adds clients) as play texts."""
    os.makedirs(folder, exist_ok=True)
    for i in range(count):
        with open(os.path.join(folder, f"play{i}_gut.txt"), "w") as f:
            f.write(PLAY.replace("ALPHA", f"ALPHA{'X' * i}"))
    return folder
