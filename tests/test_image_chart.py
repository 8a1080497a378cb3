"""The Helm chart's rendered pod running from the container image (tests/test_chart.py renders
it). In a file of its own so that it runs with the other image tests, after the image's
background build (make test runs one file per test worker at a time)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devenv.kafka import KafkaCluster
from tests.test_chart import helm, rendered_container_runs_from_the_image  # noqa: F401 - a fixture

pytestmark = [pytest.mark.image]


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("auth", [False, True], ids=["http-probes", "basic-auth"])
def test_rendered_container_runs_from_the_image(helm: str, kafka: KafkaCluster,  # noqa: F811
                                                tmp_path: Path, auth: bool) -> None:
    rendered_container_runs_from_the_image(helm, kafka, tmp_path, auth)
