"""The search: what other modules use of it. ``loop`` runs it; ``study_search`` (one study),
``opening`` (what it measures first), ``proposer`` (what it measures next), ``session``
(Optuna's study), ``pipeline`` (build and measure) and ``recording`` (results rows) are its parts; ``workload`` and ``replay`` run it on several
problems and on recorded results."""

from gemmtune.inputs import check_problem
from gemmtune.search.loop import Testbed, default_jobs, run_search
from gemmtune.search.request import Progress, SearchRequest, Summary, default_study_name

__all__ = ["Progress", "SearchRequest", "Summary", "Testbed", "check_problem", "default_jobs", "default_study_name",
           "run_search"]
