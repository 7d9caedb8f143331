"""The `deploy` marker: tests that build Docker images and run the compose stack
(test_stack.py, `make deploy-test`). They run only when selected by marker
(`pytest -m deploy`): `make test` and a bare `pytest` leave them out, so the suite
never builds images twice (.ci/run runs `make test`, then `make deploy-test`)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "deploy: builds images and runs the compose stack (only with -m deploy)",
    )


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    if "deploy" in (config.option.markexpr or ""):
        return  # asked for by marker: -m deploy (or an expression naming it)
    deploy = [i for i in items if i.get_closest_marker("deploy")]
    if deploy:
        config.hook.pytest_deselected(items=deploy)
        items[:] = [i for i in items if not i.get_closest_marker("deploy")]
