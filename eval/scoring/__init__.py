"""Official scoring rules of public benchmarks, as pure functions.

One module per kind of rule; each function names the published code it follows:

- :mod:`eval.scoring.choice` -- a multiple-choice letter out of free text (VLMEvalKit for
  MMStar/AI2D, LLaVA/ScienceQA, Video-MME, MVBench);
- :mod:`eval.scoring.vqa` -- VQA accuracy over 10 human answers (TextVQA);
- :mod:`eval.scoring.anls` -- average normalised Levenshtein similarity (DocVQA);
- :mod:`eval.scoring.relaxed` -- relaxed accuracy, 5% numeric tolerance (ChartQA);
- :mod:`eval.scoring.binary` -- yes/no parsing and metrics (POPE, MME);
- :mod:`eval.scoring.boxes` -- a box out of text in a model family's convention + IoU (RefCOCO);
- :mod:`eval.scoring.counting` -- a count out of text (CLEVR, SuperCLEVR, CountBench);
- :mod:`eval.scoring.aggregate` -- overall and per-category means of item scores.

Nothing here raises on malformed model output: an answer that cannot be read is ``None``
(or the benchmark's own fallback) and scores as wrong.
"""
