"""Every use of Optuna's private names, in one package: its public API has no way to do what these
do, and a change of its internals should break this package alone (``tests/test_optuna_adapter.py``
exercises each use against the installed Optuna; pyproject.toml allows 4.9 on, where RDBStorage
first takes ``heartbeat_stale_trial_callback``). Three ideas, a module each:

* ``storage``: what is written to Optuna's tables. ``BatchedStorage``, Optuna's relational
  storage with a trial's parameters written in one transaction (Optuna commits every
  ``suggest_*``: a dozen transactions a proposal, once most of the search process's time per
  trial), and the trials that died before their first heartbeat; ``start_running_trial``, a
  running trial created with its parameters in one write; ``trial_id``, the storage's id of a
  trial, which heartbeats and stale-trial checks take.
* ``history``: what a sampler reads of a study. ``one_read``, the study's trials read once for a
  whole proposal; ``BoundedHistory``, of a long study only the trials TPE learns from.
* ``tpe``: ``GroupedTpe``, Optuna's grouped TPE for less (each trial grouped, split and converted
  once, the bounded history), choosing among its candidates those a proposer takes.

The search and the strategies take these names from here.
"""

from gemmtune.optuna_adapter.history import BoundedHistory, one_read
from gemmtune.optuna_adapter.storage import BatchedStorage, start_running_trial, trial_id
from gemmtune.optuna_adapter.tpe import GroupedTpe

__all__ = ["BatchedStorage", "BoundedHistory", "GroupedTpe", "one_read", "start_running_trial", "trial_id"]
