"""TPE after the performance model's best predictions (``analytic.best_tilings``). A search
seeds every strategy that allows it unless ``--no-seed``; this name lets ``gemmtune replay``
compare TPE with and without the seeds."""

from __future__ import annotations

from gemmtune.strategies.tpe import Tpe


class TpeSeeded(Tpe):
    name = "tpe-seeded"
    commands = ("replay",)
    model_seeded = True
