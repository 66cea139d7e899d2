"""Building blocks of mmgrpo's self-contained HTML pages (no script but their own, no network): the
page shell and number formats (``page``), SVG charts (``svg``), media inlined as thumbnails
(``thumbnails``). Below both pages that use them: a run's ``report.html`` (``mmgrpo.reports``) and an
evaluation's (``eval.html_report``)."""
