"""Running a suite on a model: its evaluators' runners built from the registry, run whole
or sharded and merged (``suite.py``), and every fast path checked against the plain path
on the suite's own requests (``model_check.py``). Above the evaluators' packages and the
runner loop (``runners/``), which never import it."""
