"""Certificates made for a test with `openssl`, and a MariaDB server of the test session's own that
speaks TLS with them: the server this machine runs has no TLS, and its settings are not the
tests' to change."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

USER, PASSWORD = "tls_user", "tls-pass"
"""A user of that server's who must connect with TLS (`REQUIRE SSL`)."""

X509_USER = "x509_user"
"""A user who must show a client certificate signed by the test's authority (`REQUIRE X509`)."""


@dataclass(frozen=True)
class Certificates:
    """A certificate authority (`ca`), a server certificate it signed for 127.0.0.1 (`server`,
    its key `server_key`), a client certificate it signed (`client`, `client_key`), and another
    authority that signed none of them (`stranger`)."""

    ca: Path
    server: Path
    server_key: Path
    client: Path
    client_key: Path
    stranger: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(folder: Path) -> Certificates:
    """Make the certificates in `folder` (a day's validity, 2048-bit RSA keys).

    Raises:
        subprocess.CalledProcessError: openssl failed.
    """
    for name, subject in (("ca", "nilo-job test CA"), ("stranger", "another CA")):
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN={subject}",
            cwd=folder,
        )  # fmt: skip
    (folder / "server.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, subject, ext in (
        ("server", "127.0.0.1", ["-extfile", "server.ext"]),
        ("client", X509_USER, []),
    ):
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", f"/CN={subject}", cwd=folder,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-out", f"{name}.pem", *ext, cwd=folder,
        )  # fmt: skip
    for key in folder.glob("*.key"):
        key.chmod(0o644)  # the server reads its key as whoever it runs as
    return Certificates(
        folder / "ca.pem", folder / "server.pem", folder / "server.key",
        folder / "client.pem", folder / "client.key", folder / "stranger.pem",
    )  # fmt: skip


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs a MariaDB server it can start with TLS: {reason}")
    pytest.skip(reason)


def tls_server(folder: Path, certs: Certificates) -> Iterator[int]:
    """A MariaDB server of its own in `folder`, listening on 127.0.0.1 with TLS from `certs`,
    with a database `nilo`, `USER` (`REQUIRE SSL`) and `X509_USER` (`REQUIRE X509`, no
    password): its port, until the generator is closed, when the server is stopped. Without
    Debian's `mariadb-server` binaries it skips with the reason (CI: a failure)."""
    install, server = shutil.which("mariadb-install-db"), shutil.which("mariadbd")
    server = server or ("/usr/sbin/mariadbd" if os.path.exists("/usr/sbin/mariadbd") else None)
    if install is None or server is None:
        _missing("mariadb-install-db and mariadbd are not installed (Debian's mariadb-server)")
    assert install is not None
    assert server is not None
    data, run = folder / "data", folder / "run"
    run.mkdir()
    as_root = ["--user=root"] if os.geteuid() == 0 else []
    subprocess.run(
        [install, "--no-defaults", f"--datadir={data}", *as_root, "--skip-test-db",
         "--auth-root-authentication-method=socket"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    port = _free_port()
    sock = run / "mysqld.sock"
    log = (folder / "server.log").open("wb")
    proc = subprocess.Popen(
        [server, "--no-defaults", f"--datadir={data}", *as_root, f"--port={port}",
         "--bind-address=127.0.0.1", f"--socket={sock}", f"--pid-file={run / 'pid'}",
         "--skip-name-resolve", "--innodb-buffer-pool-size=16M", "--skip-log-bin",
         f"--ssl-ca={certs.ca}", f"--ssl-cert={certs.server}", f"--ssl-key={certs.server_key}"],
        stdout=log, stderr=log,
    )  # fmt: skip
    try:
        _setup(sock, proc, folder)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def _setup(sock: Path, proc: subprocess.Popen[bytes], folder: Path) -> None:
    """Once the server answers on its socket (within 60 s): the database and the users."""
    import pymysql

    deadline = time.monotonic() + 60
    while not _accepts(sock):  # (a socket of its own, closed each time: nothing left to collect)
        if proc.poll() is not None or time.monotonic() > deadline:
            said = (folder / "server.log").read_text(errors="replace")[-2_000:]
            raise AssertionError(f"the TLS MariaDB server did not start: {said}")
        time.sleep(0.05)
    conn = pymysql.connect(unix_socket=str(sock), user="root", autocommit=True)
    try:
        with conn.cursor() as cur:
            for statement in (
                "CREATE DATABASE nilo",
                f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}' REQUIRE SSL",
                f"GRANT ALL ON nilo.* TO '{USER}'@'%'",
                f"CREATE USER '{X509_USER}'@'%' REQUIRE X509",
                f"GRANT ALL ON nilo.* TO '{X509_USER}'@'%'",
            ):
                cur.execute(statement)
    finally:
        conn.close()


def _accepts(path: Path) -> bool:
    """Whether a server listens on the Unix socket at `path`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True
