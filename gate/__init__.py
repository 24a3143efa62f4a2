"""The promotion gate: a YAML policy per registered model (``policy.py``), judged on a
candidate's evaluator outputs and the champion's, once on every item (``fixed.py``) or at
the looks of a group-sequential design (``sequential.py``); the words of every check come
from ``rendering.py`` alone, and ``power.py`` says before any GPU time is spent what each
rule can decide. Pure: it reads no MLflow and moves no alias (``flows/judgement.py`` does)."""
