"""The API's route table (queueadmin.api.routing and urls): Django's route
syntax, matched without Django, by the API application and daphne's edge alike."""

from __future__ import annotations

import pytest

from queueadmin.api import views
from queueadmin.api.routing import Router, path
from queueadmin.api.urls import router


@pytest.mark.parametrize(("target", "name", "parameters"), [
    ("/api/v1/jobs", "push", {}),
    ("/api/v1/claim", "claim", {}),
    ("/api/v1/health", "health", {}),
    ("/api/v1/jobs/abc", "job", {"job_id": "abc"}),
    ("/api/v1/jobs/a.b:c-d_e", "job", {"job_id": "a.b:c-d_e"}),
    ("/api/v1/jobs/ü ?#%", "job", {"job_id": "ü ?#%"}),  # the server has decoded the path already
    ("/api/v1/jobs/x/heartbeat", "heartbeat", {"job_id": "x"}),
    ("/api/v1/jobs/x/complete", "complete", {"job_id": "x"}),
    ("/api/v1/jobs/jobs/fail", "fail", {"job_id": "jobs"}),
])
def test_a_known_path_names_its_route_and_parameters(target: str, name: str, parameters: dict[str, str]) -> None:
    found = router.resolve(target)
    assert found is not None
    route, got = found
    assert (route.name, got) == (name, parameters)


@pytest.mark.parametrize("target", [
    "/api/v1/jobs/", "/api/v1/jobs//complete", "/api/v1/jobs/x/complete/", "/api/v1/jobs/x/y/complete",
    "/api/v1/jobs/x/requeue", "/api/v1/Jobs", "/api/v1/jobs\n", "/api/v2/jobs", "/api/",
    "/api/v1/jobsx", "/api/v1/document/",
])
def test_anything_else_is_unknown(target: str) -> None:
    assert router.resolve(target) is None


def test_only_the_str_converter_and_unique_names_are_accepted() -> None:
    with pytest.raises(ValueError, match="only the str converter"):
        path("v1/jobs/<int:n>", views.job, name="n")
    with pytest.raises(ValueError, match="unique"):
        Router([path("v1/a", views.health, name="a"), path("v1/b", views.health, name="a")])


def test_every_endpoint_names_its_methods_and_whether_it_needs_the_token() -> None:
    needs = {route.name: (route.endpoint.methods, route.endpoint.token) for route in router.routes}
    assert needs["health"] == (("GET",), False)
    assert needs["operator"] == (("POST",), False)  # signed, not token-authenticated
    assert needs["push"] == (("POST",), True) and needs["document"] == (("GET",), True)
