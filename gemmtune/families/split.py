"""How a launch cuts the tiles of its last round along K: the ``Split`` a family's ``split``
returns (``base``) and xgemm_rt's stream-K makes (``rt``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Split:
    """How a launch cuts the tiles of its last round along K (xgemm_rt's STREAMK).

    Each tile before ``first`` is one work-group, in whole rounds; after them come ``pieces``,
    one work-group each, as (tile, first K-slice, end K-slice, slot): slot -1 for a whole tile,
    else where the part's sum goes. ``fixups`` lists each split tile as (tile, first slot,
    parts), its parts in consecutive slots in the order of their K-slices.
    """
    first: int
    pieces: tuple[tuple[int, int, int, int], ...] = ()
    fixups: tuple[tuple[int, int, int], ...] = ()

    @property
    def slots(self) -> int:
        return sum(parts for _, _, parts in self.fixups)
