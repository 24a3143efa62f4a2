"""vlgate: continuous validation of vision-language models.

The import package ``vlgate`` maps the repository's top-level folders (ARCHITECTURE.md, layers):
``vlgate.evaluators`` is ``evaluators/``, ``vlgate.flows`` is ``flows/``,
``vlgate.registry_hooks`` is ``registry_hooks/``, ``vlgate.dashboards`` is
``dashboards/`` (see ``[tool.setuptools]`` in pyproject.toml).
"""

__version__ = "0.1.0"
