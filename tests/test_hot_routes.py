"""The produce and fetch dispatch ahead of FastAPI's router finds exactly the routes
FastAPI registered for them, and resolves each of their paths to the same endpoint."""

from laketail.api.app import create_app
from laketail.api.hot_routes import HOT_ENDPOINTS, hot_routes
from laketail.config import load_settings

PATHS = {
    ("POST", "/topics/orders"): "produce_to_topic",
    ("POST", "/topics/orders/partitions/3"): "produce_to_partition",
    ("GET", "/topics/orders/partitions/3/records"): "fetch_records",
    ("POST", "/v1/topics/orders/records"): "produce_arrow",
    ("POST", "/v1/topics/orders/partitions/3/records"): "produce_arrow_partition",
    ("GET", "/v1/topics/orders/partitions/3/records"): "fetch_arrow",
    ("POST", "/internal/v1/replica-fetch"): "replica_fetch",
    ("POST", "/internal/v1/partitions/orders/3/append"): "append",
    ("GET", "/internal/v1/partitions/orders/3/records"): "records",
}


def test_every_hot_endpoint_is_found_and_matches_only_its_own_paths(tmp_path):
    app = create_app(load_settings(None, env={}, data=str(tmp_path)))
    routes = hot_routes(app.routes)
    assert {r.endpoint for r in routes} == HOT_ENDPOINTS  # a FastAPI upgrade must not hide one
    for (method, path), name in PATHS.items():
        matched = [(r.endpoint.__name__, params) for r in routes if (params := r.match(method, path)) is not None]
        expected = {} if path.endswith("replica-fetch") else {"topic": "orders"}
        if "/3" in path:
            expected["partition"] = "3"
        assert matched[:1] == [(name, expected)]
    # Paths the dispatcher must leave to FastAPI.
    for method, path in [("GET", "/topics/orders"), ("GET", "/topics/orders/partitions/3"),
                         ("PUT", "/topics/orders"), ("GET", "/v1/topics/orders/records"),
                         ("POST", "/internal/v1/heartbeat"), ("GET", "/internal/v1/partitions/orders/3/state")]:
        assert all(r.match(method, path) is None for r in routes)
