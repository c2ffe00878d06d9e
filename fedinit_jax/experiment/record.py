"""A checkpoint's record: what proves a restored checkpoint to be the one that was written.

Saved in the step's metadata (orbax's _CHECKPOINT_METADATA, its custom_metadata) beside the
run's config and the client store's manifest (fedinit_jax/client_store/deltas.py):

    {"format": 1, "round": t, "client_store": "host",
     "state": sha256 of the server state's checksums (state_digest),
     "rows": [row_digest(row) for the metrics rows 1..t],
     "last_row_trimmed": row_digest(row t without its evaluation fields),
     "sha256": sha256 of the config, the manifest and the fields above (metadata_digest)}

After a restore the state's digest is recomputed and compared, the metrics rows 1..t are
compared row by row, and the metadata itself is checked against its own sha256; any
difference makes the checkpoint as unusable as an unreadable one (resume.py falls back to
the previous checkpoint). `last_row_trimmed` accepts row t as a resume rewrites it when t
was the last round of a shorter run (its evaluation is not one of the longer run's).

The state's checksum works on any mesh: a leaf this process holds whole is summed in numpy
block by block (no compilation, temporaries of one block whatever the [C, ...] tables'
size), one sharded over processes (a [C, ...] client table of a multi-process run) on the
devices, without gathering it to one host. For each leaf, its raw
bits as unsigned words u_1..u_n (bfloat16 and uint8 widened, 64-bit split in two) give
s1 = sum_j u_j and s2 = sum_j j u_j, both mod 2^32 (a Fletcher checksum). One flipped bit
or one changed value changes s1; two values swapped change s2. The digest is the sha256 of
every leaf's path, shape, dtype, s1 and s2.
"""
import hashlib
import json

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["FORMAT", "Damaged", "state_digest", "row_digest", "make", "metadata_digest",
           "check_metadata", "first_row_differing"]

FORMAT = 1
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32}  # a leaf's bits by its item size
_BLOCK = 1 << 22  # words summed at once on the host: the temporaries stay ~50 MiB


class Damaged(ValueError):
    """A checkpoint (or the metrics rows it vouches for) is not what was written: the
    message says which file and why."""


@jax.jit
def _sharded_checksums(x):
    """(s1, s2) of a leaf on its devices (a leaf sharded over processes)."""
    if x.dtype == jnp.bool_:
        u = x.ravel().astype(jnp.uint32)
    elif x.dtype.itemsize == 8:
        u = jax.lax.bitcast_convert_type(x, jnp.uint32).ravel()
    else:
        u = jax.lax.bitcast_convert_type(x, _UNSIGNED[x.dtype.itemsize]).ravel().astype(
            jnp.uint32)
    j = jnp.arange(1, u.size + 1, dtype=jnp.uint32)
    return jnp.stack([jnp.sum(u, dtype=jnp.uint32), jnp.sum(u * j, dtype=jnp.uint32)])


def _host_checksums(x: np.ndarray) -> np.ndarray:
    """(s1, s2) of a host array, block by block: for a block of words starting at offset o,
    s1 += sum_k u_k and s2 += sum_k k u_k + o sum_k u_k (k = 1.., mod 2^32), the sums the
    devices compute whole."""
    x = np.ascontiguousarray(x)
    words = (x.reshape(-1).astype(np.uint8) if x.dtype == np.bool_ else
             x.reshape(-1).view(np.uint32 if x.dtype.itemsize == 8 else
                                _UNSIGNED[x.dtype.itemsize]))
    s1 = s2 = 0
    with np.errstate(over="ignore"):
        for start in range(0, words.size, _BLOCK):
            u = words[start:start + _BLOCK].astype(np.uint32)
            k = np.arange(1, u.size + 1, dtype=np.uint32)
            part = int(np.sum(u, dtype=np.uint32))
            s2 = (s2 + int(np.sum(u * k, dtype=np.uint32)) + start * part) % 2**32
            s1 = (s1 + part) % 2**32
    return np.array([s1, s2], np.uint32)


def _checksums(x) -> np.ndarray:
    """(s1, s2) of one leaf: on the host when this process holds all of it, else on the
    devices (a leaf sharded over processes: a jitted collective every process calls)."""
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return np.asarray(_sharded_checksums(x).addressable_data(0), np.uint32)
    return _host_checksums(np.asarray(x))


def state_digest(tree) -> str:
    """The sha256 (hex) of a pytree of arrays' paths, shapes, dtypes and checksums (module
    doc). Every process of a multi-process run calls it together when a leaf is sharded
    over processes."""
    digest = hashlib.sha256()
    for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
        digest.update(f"{jax.tree_util.keystr(path)}|{tuple(x.shape)}|{x.dtype}|".encode())
        digest.update(_checksums(x).tobytes())
    return digest.hexdigest()


def row_digest(row: dict) -> str:
    """16 hex digits of the sha256 of a metrics row as JSON with sorted keys."""
    return hashlib.sha256(json.dumps(row, sort_keys=True).encode()).hexdigest()[:16]


def make(rounds_done: int, state_sha: str, rows, trim, client_store: str | None) -> dict:
    """The record of the checkpoint after `rounds_done` (without its sha256: metadata_digest).

    Args:
      rounds_done: t, the checkpoint's round.
      state_sha: state_digest of the saved state.
      rows: the metrics rows 1..t as metrics.jsonl holds them.
      trim: row -> the row without its evaluation fields (resume.trimmed).
      client_store: the store that holds the clients' rows ("device", "host", "disk").
    """
    return {"format": FORMAT, "round": int(rounds_done), "client_store": client_store,
            "state": state_sha, "rows": [row_digest(r) for r in rows],
            "last_row_trimmed": row_digest(trim(rows[-1])) if rows else None}


def metadata_digest(metadata: dict) -> str:
    """The sha256 of a step's custom metadata (config, manifest, record) without the
    record's own "sha256" field."""
    record = {k: v for k, v in metadata.get("record", {}).items() if k != "sha256"}
    return hashlib.sha256(json.dumps({**metadata, "record": record}, sort_keys=True)
                          .encode()).hexdigest()


def check_metadata(metadata, path: str, rounds_done: int) -> dict:
    """The record of the checkpoint after `rounds_done` from its step metadata (as read from
    path), or Damaged saying what is wrong: no record, a record of another round or format,
    or metadata that differs from its sha256."""
    record = metadata.get("record") if isinstance(metadata, dict) else None
    if not isinstance(record, dict):
        raise Damaged(f"{path} holds no record of the checkpoint (config, state digest, "
                      "metrics digests): it was not written whole by this version")
    if record.get("format") != FORMAT or record.get("round") != rounds_done:
        raise Damaged(f"{path} records round {record.get('round')!r} (format "
                      f"{record.get('format')!r}), not round {rounds_done} (format {FORMAT})")
    if metadata_digest(metadata) != record.get("sha256"):
        raise Damaged(f"{path} differs from what was written (its sha256 does not match)")
    return record


def first_row_differing(record: dict, rows) -> int | None:
    """The first round r <= record's round whose metrics row is missing from `rows` or
    differs from the one the record vouches for, or None when rows 1..t are all as
    written."""
    digests = record["rows"]
    for r, expected in enumerate(digests, start=1):
        if r > len(rows):
            return r
        got = row_digest(rows[r - 1])
        if got != expected and not (r == len(digests)
                                    and got == record.get("last_row_trimmed")):
            return r
    return None
