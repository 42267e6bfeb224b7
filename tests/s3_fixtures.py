"""S3 fixtures for every test folder: moto's S3 server as a real process on a
loopback port, dummy credentials, fresh buckets and store URLs."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import boto3
import pytest

from tests.emulator_process import free_port, start_emulator, stop_emulator

MOTO_START_TIMEOUT = 30.0
MOTO_REGION = "us-east-1"
# Dummy credentials for moto, which accepts any; never real ones.
DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": MOTO_REGION,
}


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Run moto's S3 server in a separate process on 127.0.0.1; yield its endpoint URL.

    Requests cross real HTTP, so the store is tested through botocore's whole
    stack (signing, retries, error parsing), as against real S3.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(DUMMY_CREDENTIALS)
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    port = free_port()
    proc = start_emulator(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        port=port,
        probe="/moto-api/",
        log_path=log_path,
        name="moto server",
        timeout=MOTO_START_TIMEOUT,
        env=env,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_emulator(proc)


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Dummy credentials, and no config files or metadata service to fall back on."""
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def s3_bucket(moto_server: str, aws_credentials: None) -> str:
    """A fresh, uniquely named bucket on the moto server."""
    bucket = f"test-{uuid.uuid4().hex[:16]}"
    client = boto3.client(
        "s3",
        endpoint_url=moto_server,
        region_name=MOTO_REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    try:
        client.create_bucket(Bucket=bucket)
    finally:
        client.close()
    return bucket


@pytest.fixture
def s3_url(moto_server: str, s3_bucket: str) -> str:
    """A store URL for a fresh bucket on the moto server, with dummy credentials set."""
    return f"s3://{s3_bucket}/some-prefix?endpoint_url={quote(moto_server, safe='')}&region={MOTO_REGION}"
