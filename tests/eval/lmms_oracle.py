"""Run lmms-eval's MathVista and MMMU scorers (a separate venv) on cases given as JSON; print verdicts.

Used by the oracle tests through ``ORACLE_PYTHON``; loads only the scorer files (their package
imports torch and API clients, which the scorers do not use), with those imports stubbed.
Input (stdin): {"mathvista": [[extraction, choices, question_type, answer_type, precision, answer]...],
"mmmu_choice": [[response, options]...], "mmmu_open": [[response, answer]...]}.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import lmms_eval

TASKS = Path(lmms_eval.__file__).parent / "tasks"


def load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def stub(name: str, **attributes: object) -> None:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module


stub("lmms_eval.llm_judge", Request=object, ServerConfig=lambda **_: None, get_server=lambda **_: None)
stub("lmms_eval.tasks._task_utils.file_utils", generate_submission_file=None)
stub("lmms_eval.verifiers", VerificationPipeline=object)
stub("lmms_eval.verifiers.openai", OpenAIVerifier=object)
load("lmms_eval.tasks._task_utils.mmmu_mcq_utils", TASKS / "_task_utils" / "mmmu_mcq_utils.py")
mathvista = load("oracle_mathvista", TASKS / "mathvista" / "mathvista_evals.py").MathVistaEvaluator()
mmmu = load("oracle_mmmu", TASKS / "mmmu" / "utils.py")

cases = json.load(sys.stdin)
verdicts = {
    "mathvista": [
        mathvista.safe_equal(mathvista.normalize_extracted_answer(extraction, choices, qtype, atype, precision), answer)
        for extraction, choices, qtype, atype, precision, answer in cases.get("mathvista", [])
    ],
    "mathvista_prediction": [
        mathvista.normalize_extracted_answer(extraction, choices, qtype, atype, precision)
        for extraction, choices, qtype, atype, precision, _ in cases.get("mathvista", [])
    ],
    "mmmu_choice": [
        mmmu.parse_multi_choice_response(response, *reversed(mmmu.get_multi_choice_info(options)))
        for response, options in cases.get("mmmu_choice", [])
    ],
    "mmmu_open": [
        mmmu.eval_open(answer, mmmu.parse_open_response(response)) for response, answer in cases.get("mmmu_open", [])
    ],
}
print(json.dumps(verdicts))
