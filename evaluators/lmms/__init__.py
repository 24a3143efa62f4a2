"""lmms-eval's tasks as suite evaluators (``kind: lmms-eval``, docs/lmms-eval.md): the task's
own docs, prompts, filters, ``process_results`` and aggregations, answered by vlgate's
backends and decided on by vlgate's gate."""
