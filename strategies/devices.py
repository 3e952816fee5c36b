"""A device: a SuperNode that holds one real user's own data.

In a ``run.federation = "devices"`` run every SuperNode is one user's
device.  Its node config says who it is and where its data lives::

    flower-supernode ... --node-config 'user-id=17 data-file="/data/me.txt"'

* ``user-id``: the user's global id in ``0..n-1`` (``n`` is
  ``population.users``, the enrolled population).  The server samples over
  global ids, so this is how its per-round sample reaches the device;
* ``data-file``: the user's items, ``.txt`` with one item per line, or
  ``.csv`` / ``.parquet`` with an ``item`` column (and, if it has a
  ``user`` column, one user only); an item listed several times has that
  local frequency (TrieHH Algorithm 3).

The items are encoded with the run's public codec (``[protocol]``), so a
device and the server agree on symbols without the server ever seeing the
data, and reports draw from the operating system's secure randomness
(``fedhh.kernels.randomness.SecureRandomness``), never from the run's public seed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fedhh.data.items import ItemCodec
from fedhh.data.population import Shard, Vocabulary
from fedhh.data.sources import read_user_items
from fedhh.errors import InputError

USER_ID = "user-id"
DATA_FILE = "data-file"


def device_of(node_config: Mapping[str, Any], n_users: int) -> tuple[int, str]:
    """(user id, data file) from a device's node config, with errors naming the key."""
    missing = [key for key in (USER_ID, DATA_FILE) if key not in node_config]
    if missing:
        raise InputError(
            f'node config lacks {missing}: in a run.federation = "devices" run every SuperNode is one '
            f"user's device; start it with --node-config '{USER_ID}=0 {DATA_FILE}=\"/path/to/items.txt\"'"
        )
    user_id, data_file = node_config[USER_ID], node_config[DATA_FILE]
    if not isinstance(user_id, int) or isinstance(user_id, bool) or not 0 <= user_id < n_users:
        raise InputError(
            f"node config {USER_ID}: must be an integer in 0..{n_users - 1} (population.users = {n_users}), "
            f"got {user_id!r}"
        )
    if not isinstance(data_file, str) or not data_file:
        raise InputError(f"node config {DATA_FILE}: must name the user's data file, got {data_file!r}")
    return user_id, data_file


def device_shard(user_id: int, data_file: str, codec: ItemCodec) -> Shard:
    """The device's user as a shard of one, re-read when the file changes."""
    path = Path(data_file)
    stamp = path.stat().st_mtime_ns if path.is_file() else -1
    return _device_shard(user_id, str(path), stamp, codec)


@functools.lru_cache(maxsize=4)
def _device_shard(user_id: int, data_file: str, modified_ns: int, codec: ItemCodec) -> Shard:
    try:
        users, items = read_user_items(data_file)
        if Path(data_file).suffix.lower() in (".csv", ".parquet", ".pq") and len({str(u) for u in users}) > 1:
            raise InputError(f"it holds {len({str(u) for u in users})} users; a device holds one user's items")
        distinct = list(dict.fromkeys(items))
        vocabulary, item_id = Vocabulary.encode(distinct, codec)
    except ValueError as error:  # ItemError included: name the node's key, not population.path
        raise InputError(f"node config {DATA_FILE} {data_file!r}: {error}") from None
    index = {item: i for i, item in enumerate(distinct)}
    ids = item_id[[index[item] for item in items]] if items else np.zeros(0, dtype=np.int64)
    return Shard.from_pairs(vocabulary, user_id, 1, np.zeros(ids.size, dtype=np.int64), ids)
