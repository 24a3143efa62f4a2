"""MLflow searches read to their last page (one page silently keeps the newest)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run
    from mlflow.entities.model_registry import ModelVersion, RegisteredModel
    from mlflow.store.entities.paged_list import PagedList

Item = TypeVar("Item")


def pages(search: Callable[[str | None], PagedList[Item]]) -> Iterator[Item]:
    """Every item of a paged MLflow search (``search(page_token)`` → a PagedList)."""
    token = None
    while True:
        page = search(token)
        yield from page
        token = page.token
        if not token:
            return


#: runs per page of ``search_all_runs`` (MLflow's own maximum is 50,000)
RUNS_PAGE = 1000


def search_all_runs(client: MlflowClient, experiment_ids: list[str], filter_string: str, page_size: int | None = None) -> list[Run]:
    """Every run the filter matches, page after page: a model's scheduled drift checks
    outgrow any one page (hourly: 8,760 a year), and one page silently keeps the newest."""
    size = page_size or RUNS_PAGE
    return list(pages(lambda token: client.search_runs(experiment_ids, filter_string=filter_string, max_results=size, page_token=token)))


def registered_models(client: MlflowClient) -> list[RegisteredModel]:
    """Every registered model, all pages of them."""
    return list(pages(lambda token: client.search_registered_models(max_results=1000, page_token=token)))


def version_number(version: object) -> float:
    """A registry version as a number for ordering (``"10"`` after ``"3"``); anything else last."""
    try:
        return float(str(version)) if version is not None else float("inf")
    except (TypeError, ValueError):
        return float("inf")


def model_versions(client: MlflowClient, model_name: str) -> list[ModelVersion]:
    """Every version of ``model_name``, oldest first. MLflow's filter strings have no escape
    character, so a name is quoted with the quote it does not contain; a name holding both
    kinds is matched here over every version instead (a name must never change, or break,
    the query it is put into)."""
    if "'" not in model_name:
        query: str | None = f"name='{model_name}'"
    elif '"' not in model_name:
        query = f'name="{model_name}"'
    else:
        query = None
    found = pages(lambda token: client.search_model_versions(query, max_results=10000, page_token=token))
    return sorted((version for version in found if version.name == model_name), key=lambda version: int(version.version))
