"""TLS to MariaDB: the URL's `ssl_mode`, `ssl_ca`, `ssl_cert` and `ssl_key`, against a MariaDB
server of the session's own that speaks TLS with certificates made for it (`tests/helpers/tls`),
whose users must connect with TLS (`REQUIRE SSL`) or with a client certificate (`REQUIRE
X509`): a store that gets through is encrypted. Without the server's binaries the tests skip
with the reason, except in CI (CI=true), where that is a failure."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

import nilo_job as job
from tests.helpers.tls import PASSWORD, USER, X509_USER, Certificates, make_certificates, tls_server

pytest.importorskip("asyncmy")

from nilo_job.store.mysql.connections import server_of

pytestmark = pytest.mark.mariadb


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="session")
def tls_port(tmp_path_factory: pytest.TempPathFactory, certs: Certificates) -> Iterator[int]:
    yield from tls_server(tmp_path_factory.mktemp("tls-mariadb"), certs)


def url(port: int, user: str = USER, host: str = "127.0.0.1", **options: Path | str) -> str:
    auth = f"{user}:{quote(PASSWORD)}" if user == USER else user
    query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in options.items())
    return f"mariadb://{auth}@{host}:{port}/nilo" + (f"?{query}" if query else "")


@dataclass
class Ping:
    nilo_job = "tls.ping"
    retry = job.Retry.NONE

    n: int

    async def run(self) -> None:
        pass


async def _round_trip(store_url: str) -> tuple[int, int]:
    """Make the tables, push two rows, run them: the rows run and the rows left."""
    table = job.Table(store_url)
    try:
        await table.create_missing()
        queue = job.Jobs(kinds=[Ping], store=table)
        await queue.push(Ping(1))
        await queue.push(Ping(2))
        ran = await queue.drain()
        return ran, sum(await queue.stats())
    finally:
        await table.close()


async def _refused(store_url: str) -> str:
    """What a store opened from `store_url` says when it cannot reach its server."""
    table = job.Table(store_url)
    try:
        with pytest.raises(job.StoreUnavailable) as refused:
            await table.create_missing()
    finally:
        await table.close()
    return str(refused.value)


@pytest.mark.parametrize("mode", ["REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY"])
async def test_a_store_over_tls_makes_its_tables_and_runs_its_rows(
    tls_port: int, certs: Certificates, mode: str
) -> None:
    """The user may only connect with TLS: every call of the store went through it."""
    assert await _round_trip(url(tls_port, ssl_mode=mode, ssl_ca=certs.ca)) == (2, 0)


async def test_a_client_certificate_logs_in_the_user_who_must_show_one(
    tls_port: int, certs: Certificates
) -> None:
    with_cert = url(
        tls_port, X509_USER, ssl_ca=certs.ca, ssl_cert=certs.client, ssl_key=certs.client_key
    )
    assert await _round_trip(with_cert) == (2, 0)
    without = await _refused(url(tls_port, X509_USER, ssl_ca=certs.ca))
    assert "refused the login of user 'x509_user'" in without


async def test_a_url_without_tls_is_refused_by_a_user_who_must_use_it(tls_port: int) -> None:
    assert "refused the login of user 'tls_user'" in await _refused(url(tls_port))


async def test_a_certificate_another_authority_signed_is_refused_in_a_sentence(
    tls_port: int, certs: Certificates
) -> None:
    said = await _refused(url(tls_port, ssl_ca=certs.stranger))
    assert said.startswith(
        f"cannot reach MariaDB at 127.0.0.1:{tls_port}/nilo over TLS: its certificate is not "
        f"signed by ssl_ca={str(certs.stranger)!r} (ssl_mode=VERIFY_CA): "
    ), said
    assert "CERTIFICATE_VERIFY_FAILED" in said
    assert PASSWORD not in said


async def test_verify_identity_refuses_a_certificate_for_another_host(
    tls_port: int, certs: Certificates
) -> None:
    """The server's certificate names 127.0.0.1; the URL names localhost."""
    wrong_host = url(tls_port, host="localhost", ssl_mode="VERIFY_IDENTITY", ssl_ca=certs.ca)
    said = await _refused(wrong_host)
    assert said.startswith(
        f"cannot reach MariaDB at localhost:{tls_port}/nilo over TLS: its certificate is not "
        f"signed by ssl_ca={str(certs.ca)!r} or does not name the URL's host "
        "(ssl_mode=VERIFY_IDENTITY): "
    ), said
    # The same certificate verifies against its authority without the host's check.
    assert await _round_trip(url(tls_port, host="localhost", ssl_ca=certs.ca)) == (2, 0)


async def test_tls_asked_of_a_server_without_it_is_refused_in_a_sentence(
    mariadb_url: str,
) -> None:
    said = await _refused(f"{mariadb_url}?ssl_mode=REQUIRED")
    assert said.startswith("cannot reach MariaDB at 127.0.0.1:3306/"), said
    assert " over TLS: TLS could not be set up with it (" in said
    assert said.endswith(
        "); a server without TLS answers so (SHOW VARIABLES LIKE 'have_ssl' says YES on one "
        "that has it)"
    )


def test_the_url_says_how_the_server_is_checked(certs: Certificates) -> None:
    plain = server_of("mysql://app@db/shop")
    assert plain.tls is None
    assert server_of("mysql://app@db/shop?ssl_mode=disabled").tls is None
    required = server_of("mysql://app@db/shop?ssl_mode=REQUIRED").tls
    assert required is not None
    assert (required.mode, required.context.verify_mode) == ("REQUIRED", ssl.CERT_NONE)
    by_ca = server_of(f"mysql://app@db/shop?ssl_ca={certs.ca}").tls  # VERIFY_CA, as MySQL's
    assert by_ca is not None
    assert (by_ca.mode, by_ca.ca) == ("VERIFY_CA", str(certs.ca))
    assert (by_ca.context.verify_mode, by_ca.context.check_hostname) == (ssl.CERT_REQUIRED, False)
    identity = server_of(f"mysql://app@db/shop?ssl_mode=verify_identity&ssl_ca={certs.ca}").tls
    assert identity is not None
    assert (identity.context.verify_mode, identity.context.check_hostname) == (
        ssl.CERT_REQUIRED,
        True,
    )


@pytest.mark.parametrize(
    ("query", "said"),
    [
        (
            "ssl_mode=PREFERRED",
            "ssl_mode='PREFERRED' is none of DISABLED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY "
            "(MySQL's PREFERRED, TLS only when the server offers it, is not taken: say REQUIRED "
            "or a VERIFY_ mode)",
        ),
        (
            "ssl_mode=DISABLED&ssl_ca={ca}",
            "ssl_mode=DISABLED with a certificate or key: drop them, or say REQUIRED, VERIFY_CA "
            "or VERIFY_IDENTITY",
        ),
        (
            "ssl_cert={client}",
            "a client certificate needs both ssl_cert and ssl_key, the URL gives only ssl_cert",
        ),
        ("ssl_ca=/nowhere/ca.pem", "ssl_ca='/nowhere/ca.pem' is not a file here"),
        (
            "ssl_ca={key}",
            "the TLS files cannot be used ({error}): ssl_ca and ssl_cert must be PEM "
            "certificates, ssl_key the PEM key of ssl_cert",
        ),
    ],
)
def test_tls_options_that_cannot_work_are_refused_in_a_sentence(
    certs: Certificates, query: str, said: str
) -> None:
    filled = query.format(ca=certs.ca, client=certs.client, key=certs.client_key)
    given = f"mysql://app:secret@db/shop?{filled}"
    with pytest.raises(job.Refusal) as refused:
        server_of(given)
    shown = given.replace(":secret@", "@")
    prefix, _, rest = said.partition("({error})")
    text = str(refused.value)
    assert text.startswith(f"job.Table({shown!r}): {prefix}"), text
    assert text.endswith(rest), text
    assert "secret" not in text
