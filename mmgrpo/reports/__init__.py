"""Run reports: ``report.html`` (curves, sample gallery, evaluations, alerts) and run comparisons.

:mod:`run_data` reads a run folder, :mod:`curves` and :mod:`alerts` are pure functions of its
metrics, :mod:`thumbnails` renders media small, :mod:`html` writes one self-contained page.
"""
