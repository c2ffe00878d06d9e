"""Bernoulli participation: |S| varies, padded slots are masked; against the numpy reference."""
import itertools
import math

import jax
import numpy as np
import pytest
from conftest import (
    CASES,
    DIM,
    NUM_CLIENTS,
    QUIET,
    assert_matches,
    assert_states_match,
    flat,
    linreg_loss,
    params_from,
    planned_run,
    ri_cases,
    ri_options,
)
from numpy_reference import simulate

from fedinit_jax import (
    RoundInput,
    algorithms,
    check_round_input,
    data,
    with_runtime,
)

SLOTS = 5  # the static client axis; every round below samples fewer
ROUND_IDS = ([3], [0, 1, 2, 4], [1, 3], [0, 1, 2, 3])  # |S| = 1, 4, 2, 4 of C = 5


@pytest.fixture(scope="module")
def varying_rounds():
    """Rounds with |S| varying, as (ids, xs, ys, lr) for the reference."""
    rng = np.random.default_rng(1)
    true_w = rng.normal(size=(NUM_CLIENTS, DIM))
    rounds = []
    for t, ids in enumerate(ROUND_IDS):
        xs = rng.normal(size=(len(ids), 4, 8, DIM)).astype(np.float32)
        ys = np.einsum("nkbd,nd->nkb", xs, true_w[ids]).astype(np.float32) - 0.3
        rounds.append((np.array(ids, np.int32), xs, ys, np.float32(0.05 * 0.998 ** t)))
    return rounds


def padded(rounds, slots=SLOTS, fill=np.nan):
    """The rounds padded to `slots` clients: padded ids repeat a sampled client (a duplicate
    if it counted) and their batches hold `fill` (NaN: anything that counted would show)."""
    out = []
    for ids, xs, ys, lr in rounds:
        ids_p, mask = data.pad(ids, slots)
        ids_p[~mask] = ids[0]
        xs_p = np.full((slots,) + xs.shape[1:], fill, np.float32)
        ys_p = np.full((slots,) + ys.shape[1:], fill, np.float32)
        xs_p[mask], ys_p[mask] = xs, ys
        out.append(RoundInput(ids_p, (xs_p, ys_p), lr, mask))
    return out


def run_inputs(algo, theta0, inputs):
    state = algo.init(params_from(theta0), num_clients=NUM_CLIENTS)
    history = []
    for t, inp in enumerate(inputs):
        state, metrics = algo.apply(state, inp, jax.random.fold_in(jax.random.key(0), t))
        history.append({k: float(v) for k, v in metrics.items()})
    return state, history


# every algorithm once, the SAM family at rho > 0
VARYING = [c for c in CASES if c[1].get("rho", 1.0) > 0] + [("fedavg", {}, {})]


@pytest.mark.parametrize("execution", ["vmap", "sequential"])
@pytest.mark.parametrize("name, hparams, ref_kwargs, beta, delta_from",
                         ri_cases(VARYING, betas=(0.1,)))
def test_varying_participation_matches_reference(varying_rounds, theta0, name, hparams,
                                                 ref_kwargs, beta, delta_from, execution):
    algo = with_runtime(algorithms.get(name, linreg_loss, clip_norm=1.0, weight_decay=1e-3,
                                       **hparams, **ri_options(name, beta, delta_from)),
                        execution=execution)
    state, history = run_inputs(algo, theta0, padded(varying_rounds))
    ref = simulate(name, theta0, NUM_CLIENTS, varying_rounds, beta=beta, delta_from=delta_from,
                   clip=1.0, wd=1e-3, **ref_kwargs)
    assert ref["clipped_steps"] > 0
    assert_matches(state, history, ref)
    assert_states_match(name, state, ref)


def test_bound_never_changes_the_result(varying_rounds, theta0):
    """The same rounds padded to 5 or 8 slots, and a full mask against no mask."""
    algo = with_runtime(algorithms.scaffold(linreg_loss, beta=0.1), execution="sequential")
    a, ha = run_inputs(algo, theta0, padded(varying_rounds, 5, fill=0.0))
    b, hb = run_inputs(algo, theta0, padded(varying_rounds, 8, fill=7.0))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6)
    plain = [RoundInput(ids, (xs, ys), lr) for ids, xs, ys, lr in varying_rounds]
    full = [inp._replace(mask=np.ones(len(inp.client_ids), bool)) for inp in plain]
    c, _ = run_inputs(algo, theta0, full)
    d, _ = run_inputs(algo, theta0, plain)
    for x, y in zip(jax.tree.leaves(c), jax.tree.leaves(d)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-7)


def test_mask_checks(varying_rounds, theta0):
    algo = algorithms.fedavg(linreg_loss)
    state = algo.init(params_from(theta0), num_clients=NUM_CLIENTS)
    inp = padded(varying_rounds)[1]
    with pytest.raises(ValueError, match="every slot as padding"):
        check_round_input(algo, state, inp._replace(mask=np.zeros(SLOTS, bool)))
    with pytest.raises(ValueError, match="mask must be a bool"):
        check_round_input(algo, state, inp._replace(mask=np.ones(SLOTS, np.int32)))
    with pytest.raises(ValueError, match="duplicates"):  # padded duplicates are fine; real not
        check_round_input(algo, state, inp._replace(mask=np.ones(SLOTS, bool)))


def test_bernoulli_sampling_and_bound():
    rng = np.random.default_rng(0)
    sizes = [data.sample_bernoulli(rng, 100, 0.1).size for _ in range(4000)]
    assert abs(np.mean(sizes) - 10.0) < 0.2 and abs(np.var(sizes) - 9.0) < 0.8
    assert min(sizes) >= 1  # an empty draw is redrawn
    assert [data.sample_bernoulli(rng, 20, 0.01).size >= 1 for _ in range(200)] == [True] * 200
    for c, p in ((100, 0.1), (200, 0.05), (20, 0.25)):
        n = data.bernoulli_bound(c, p)
        pmf = [math.comb(c, k) * p ** k * (1 - p) ** (c - k) for k in range(c + 1)]
        assert sum(pmf[n + 1:]) <= 1e-6 < sum(pmf[n:])  # the smallest such bound
        assert data.bernoulli_bound(c, p, multiple=4) % 4 == 0
    assert data.bernoulli_bound(10, 1.0) == 10


@pytest.mark.parametrize("draw", ["per_client", "count"])
def test_both_bernoulli_draws_give_every_subset_its_probability(draw):
    """Every non-empty S of C = 4 clients, p = 0.3, against its exact probability
    p^|S| (1 - p)^(C - |S|) / (1 - (1 - p)^C) (an empty draw is redrawn): chi-square over
    the 15 subsets from 30,000 draws, below its 0.1% critical value (df 14: 36.12)."""
    c, p, draws = 4, 0.3, 30_000
    rng = np.random.default_rng(7)
    counts = {}
    for _ in range(draws):
        ids = data.sample_bernoulli(rng, c, p, draw)
        assert ids.dtype == np.int32 and np.all(np.diff(ids) > 0)  # sorted, distinct
        counts[tuple(ids)] = counts.get(tuple(ids), 0) + 1
    nonempty = 1 - (1 - p) ** c
    subsets = [s for k in range(1, c + 1) for s in itertools.combinations(range(c), k)]
    expected = {s: draws * p ** len(s) * (1 - p) ** (c - len(s)) / nonempty for s in subsets}
    assert set(counts) <= set(subsets)
    chi2 = sum((counts.get(s, 0) - e) ** 2 / e for s, e in expected.items())
    assert chi2 < 36.12, chi2
    with pytest.raises(ValueError, match="draw='bogus': allowed: per_client, count"):
        data.sample_bernoulli(rng, c, p, "bogus")


def test_pad_grows_past_the_bound_instead_of_dropping():
    ids, mask = data.pad(np.array([4, 7, 9]), 5)
    assert ids.tolist() == [4, 7, 9, 0, 0] and mask.tolist() == [True] * 3 + [False] * 2
    ids, mask = data.pad(np.arange(7), 5)  # more than the bound: nothing is cut
    assert ids.size == 10 and mask.sum() == 7 and ids[:7].tolist() == list(range(7))


def test_two_devices_with_padded_slots(varying_rounds, theta0):
    """shard_map over 2 devices with masked slots (lax.cond in each shard) = the reference."""
    algo = algorithms.scaffold(linreg_loss, beta=0.1, clip_norm=1.0, weight_decay=1e-3)
    algo = with_runtime(algo, execution="sequential", num_devices=2)
    state, history = run_inputs(algo, theta0, padded(varying_rounds, 6))
    ref = simulate("scaffold", theta0, NUM_CLIENTS, varying_rounds, beta=0.1, clip=1.0, wd=1e-3)
    assert_matches(state, history, ref)


@pytest.mark.parametrize("devices", [1, 2, 3, 4])
def test_spread_deals_the_real_clients_round_robin_over_the_device_blocks(devices):
    """data.spread against a loop: block b holds real entries b, b + D, ... in order, then
    the padded entries in order; every block gets floor or ceil(|S| / D) real clients."""
    slots = 12
    for real in range(slots + 1):
        order = data.spread(real, slots, devices)
        padded, want = iter(range(real, slots)), []
        for b in range(devices):
            mine = [j for j in range(real) if j % devices == b]
            want += mine + [next(padded) for _ in range(slots // devices - len(mine))]
        assert order.tolist() == want, (real, devices)
        counts = (order < real).reshape(devices, -1).sum(1)
        assert counts.max() - counts.min() <= 1
    with pytest.raises(ValueError, match="do not split over 5 devices"):
        data.spread(3, 12, 5)


def noisy_linreg_loss(params, batch, key):
    """linreg_loss plus a term drawn from the key: a run depends on each client's key."""
    return linreg_loss(params, batch, key) + 0.1 * jax.numpy.sum(
        params["w"] * jax.random.normal(key, params["w"].shape))


def test_a_clients_randomness_follows_its_id_not_its_slot(varying_rounds, theta0):
    """The run loop's deal (data.spread over 2 devices) moves the real clients to other slots:
    with a loss that draws from its key, the rounds equal the compact ones on one device."""
    compact = padded(varying_rounds, 6)
    dealt = []
    for inp in compact:
        order = data.spread(int(inp.mask.sum()), 6, 2)
        xs, ys = inp.batches
        dealt.append(RoundInput(inp.client_ids[order], (xs[order], ys[order]), inp.local_lr,
                                inp.mask[order]))
    assert any(not np.array_equal(a.client_ids, b.client_ids) for a, b in zip(dealt, compact))
    algo = algorithms.fedinit(noisy_linreg_loss, beta=0.1)
    one = run_inputs(with_runtime(algo, execution="sequential"), theta0, compact)
    two = run_inputs(with_runtime(algo, execution="sequential", num_devices=2), theta0, dealt)
    for a, b in zip(jax.tree.leaves(one[0]), jax.tree.leaves(two[0])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    for a, b in zip(one[1], two[1]):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)


def test_the_loop_deals_a_bernoulli_rounds_clients_over_the_devices(tmp_path, monkeypatch):
    """On 2 devices every round's real slots split evenly over the two halves of the slots
    (padded after the real ones, all would sit in the first half); S drawn as a count and a
    subset (participation_draw="count")."""
    from conftest import quiet_config

    from fedinit_jax.experiment import simulation

    masks, check = [], simulation.check_round_input
    monkeypatch.setattr(simulation, "check_round_input",
                        lambda algo, state, inp: (masks.append(inp.mask), check(algo, state, inp)))
    planned_run(quiet_config(participation_mode="bernoulli", participation_draw="count",
                                num_clients=20, participation=0.2, num_devices=2, rounds=3,
                                eval_every=3),
                   str(tmp_path), **QUIET)
    assert len(masks) == 3 and masks[0].size >= 8
    for mask in masks:
        first, second = mask.reshape(2, -1).sum(1)
        assert abs(first - second) <= 1 and first + second >= 1


def test_bernoulli_run_through_the_loop_resumes_exactly(tmp_path):
    """The host loop samples |S| per round, and a run extended from 3 to 6 rounds equals an
    uninterrupted 6-round run."""
    from experiments.configs import default

    config = {**default.get_config().to_dict(), "participation_mode": "bernoulli",
              "algorithm": "feddyn", "beta": 0.1, "rounds": 6, "local_epochs": 1,
              "eval_every": 3, "checkpoint_every": 3}
    whole = planned_run(config, str(tmp_path / "whole"), **QUIET)
    planned_run({**config, "rounds": 3}, str(tmp_path / "split"), **QUIET)
    split = planned_run(config, str(tmp_path / "split"), **QUIET)
    sizes = [row["clients"] for row in whole]
    assert len(set(sizes)) > 1 and min(sizes) >= 1  # |S| varies, never empty
    for a, b in zip(whole, split):
        for k in ("clients", "train_loss", "divergence", "divergence_all"):
            assert a.get(k) == b.get(k), (k, a["round"])


def test_momentum_offset_counts_the_real_clients(varying_rounds, theta0):
    """ri_offset="momentum" decays m^t by 1 - |S|/C of the real clients: padded rounds match
    the reference, whatever the static bound."""
    algo = with_runtime(algorithms.fedinit(linreg_loss, beta=0.1, ri_offset="momentum",
                                           first_visit="global", clip_norm=None,
                                           weight_decay=None), execution="sequential")
    state, history = run_inputs(algo, theta0, padded(varying_rounds, 8, fill=0.0))
    ref = simulate("fedavg", theta0, NUM_CLIENTS, varying_rounds, beta=0.1,
                   ri_offset="momentum")
    np.testing.assert_allclose(flat(state.params), ref["w"], rtol=1e-5, atol=1e-6)
    rows = np.concatenate([np.asarray(state.ri_rows["w"]),
                           np.asarray(state.ri_rows["b"])[:, None]], axis=1)
    np.testing.assert_allclose(rows, ref["w_local"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(flat(state.ri_state), ref["ri_state"], rtol=1e-5, atol=1e-6)
    for got, want in zip(history, ref["history"], strict=True):
        for name in ("train_loss", "divergence"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
