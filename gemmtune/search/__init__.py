"""The search: what other modules use of it. ``loop`` runs it; ``session`` (Optuna), ``pipeline``
(build and measure), ``recording`` (results rows) and ``lane`` (one study) are its parts."""

from gemmtune.inputs import check_problem
from gemmtune.search.loop import Workers, default_jobs, run_search
from gemmtune.search.request import Progress, SearchRequest, Summary, default_study_name

__all__ = ["Progress", "SearchRequest", "Summary", "Workers", "check_problem", "default_jobs", "default_study_name",
           "run_search"]
