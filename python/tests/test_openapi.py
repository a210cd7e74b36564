"""The client against the server's OpenAPI document (``/api/roamkv/v1/openapi.json``): every
request each method of ``roamkv.Client`` sends is a documented operation, with documented query
parameters only."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

import requests

import roamkv
from conftest import TOKEN


def operations(spec):
    """(METHOD, compiled path pattern, parameter names) of every documented operation."""
    out = []
    for path, ops in spec["paths"].items():
        pattern = re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")
        for method, op in ops.items():
            names = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
            out.append((method.upper(), pattern, names))
    return out


def test_every_call_of_the_client_is_a_documented_operation(server, client, tmp_path, monkeypatch):
    spec = requests.get(f"{server.url}/api/roamkv/v1/openapi.json",
                        headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30).json()
    sent = []
    real = requests.Session.request

    def recording(self, method, url, **kwargs):
        answer = real(self, method, url, **kwargs)
        sent.append((method, answer.url))
        return answer

    monkeypatch.setattr(requests.Session, "request", recording)
    client.put([{"device": "api-dev", "sensor": "s", "ts": 1, "value": "v"}])
    client.devices()
    client.latest("api-dev", sensor="s")
    client.scan("api-dev", sensor="s", start=0, end="2030-01-01T00:00:00Z")
    client.export(tmp_path / "x.csv", devices=["api-dev"], start="2000-01-01T00:00:00Z")
    client.stats()
    client.depart("api-dev")
    assert len(sent) == 7
    documented = operations(spec)
    for method, url in sent:
        parts = urlsplit(url)
        matches = [names for m, pattern, names in documented
                   if m == method and pattern.match(parts.path)]
        assert matches, f"{method} {parts.path} is not in the document"
        for name, _ in parse_qsl(parts.query):
            assert name in matches[0], f"{method} {parts.path}: ?{name} is not documented"
