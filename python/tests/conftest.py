"""A real ``roamkv serve`` for the tests: the binary from ``$ROAMKV_BIN`` (the Rust test that
runs this suite sets it), on a free loopback port, with a token, in a temporary data directory."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time

import pytest
import requests

TOKEN = "python-client-test-token-0123456789"


def _binary() -> str:
    path = os.environ.get("ROAMKV_BIN") or shutil.which("roamkv")
    if not path:
        raise RuntimeError("set ROAMKV_BIN to the roamkv binary (cargo build --release)")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        token_file = root / "token"
        token_file.write_text(TOKEN)
        token_file.chmod(0o600)
        self.log = open(root / "serve.log", "wb")
        self.process = subprocess.Popen(
            [_binary(), "serve", "--data", str(root / "data"), "--listen",
             f"127.0.0.1:{self.port}", "--auth-token-file", str(token_file)],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"roamkv serve exited: {(root / 'serve.log').read_text()}")
            try:
                if requests.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except requests.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("roamkv serve not ready within 30 s")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


@pytest.fixture(scope="session")
def server():
    root = pathlib.Path(tempfile.mkdtemp(prefix="roamkv-python-"))
    srv = Server(root)
    try:
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def client(server):
    import roamkv

    with roamkv.Client(server.url, token=TOKEN) as c:
        yield c
