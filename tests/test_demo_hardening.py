"""The dashboard and folders from others (issue 52, point 6): a malformed config.json in one
run folder (nested 100,000 brackets deep, not UTF-8) makes that run alone "unreadable" in
/api/runs; a hard link inside the runs folder to a file outside it, and a file of another
user, are never served."""

from __future__ import annotations

import json
import os
import urllib.request

import pytest

from tests.test_demo_server import SECRET, start, write_run


def get(srv, path):
    try:
        with urllib.request.urlopen(srv.url + path.lstrip("/"), timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.mark.parametrize("bad", [b"[" * 100_000, b"\xff\xfe{", b'{"env_id": "x"'])
def test_a_malformed_config_affects_its_run_alone(tmp_path, bad):
    root = tmp_path / "runs"
    write_run(root / "good")
    write_run(root / "bad")
    (root / "bad" / "config.json").write_bytes(bad)
    srv = start(root)
    try:
        status, body = get(srv, "/api/runs")
        assert status == 200, body[:200]
        runs = {r["name"]: r for r in json.loads(body)["runs"]}
        assert runs["good"]["status"] == "running" and runs["good"]["env_id"] == "CartPole-v1"
        assert runs["bad"]["status"] == "unreadable"
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_hard_link_to_a_file_outside_the_runs_folder_is_not_served(tmp_path):
    root = tmp_path / "runs"
    write_run(root / "r")
    secret = tmp_path / "secret.json"
    secret.write_bytes(SECRET)
    (root / "r" / "eval.json").unlink(missing_ok=True)
    os.link(secret, root / "r" / "eval.json")
    (root / "r" / "status.json").unlink()
    os.link(secret, root / "r" / "status.json")
    srv = start(root)
    try:
        for path in ("/api/runs", "/api/runs/r/info", "/files/r/eval.json", "/files/r/status.json"):
            status, body = get(srv, path)
            assert b"outside the runs folder" not in body, (path, status)
        status, _ = get(srv, "/files/r/eval.json")
        assert status == 404
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a file to another user needs root")
def test_a_file_of_another_user_is_not_served(tmp_path):
    root = tmp_path / "runs"
    write_run(root / "r")
    (root / "r" / "eval.json").write_bytes(SECRET)
    os.chown(root / "r" / "eval.json", 12345, 12345)
    srv = start(root)
    try:
        status, body = get(srv, "/files/r/eval.json")
        assert status == 404 and b"outside the runs folder" not in body
    finally:
        srv.shutdown()
        srv.server_close()
