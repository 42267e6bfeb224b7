"""A scripted S3 endpoint: S3's answers, one by one, from a real HTTP server
on 127.0.0.1 (``scripted_s3`` in tests/engine/conftest.py), for what moto
cannot show (409, 503, 403, retried writes, a compatible store that ignores
conditions)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from engine.stores.s3 import S3Store
from tests.engine.scripted_http import Reply, Script, ScriptedServers


def s3_reply(
    status: int,
    *,
    code: str = "",
    body: bytes = b"",
    etag: str = "",
    content_type: str = "application/octet-stream",
    delay: float = 0.0,
) -> Reply:
    """A scripted S3 answer: an S3 error document with ``code``, or ``body`` with an ETag."""
    if code:
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>scripted</Message><RequestId>r1</RequestId></Error>"
        ).encode()
        content_type = "application/xml"
    headers = (("Content-Type", content_type), *((("ETag", etag),) if etag else ()))
    return Reply(status=status, body=body, headers=headers, delay=delay)


@pytest.fixture
def scripted_s3(aws_credentials: None) -> Iterator[Callable[..., tuple[Script, S3Store]]]:
    """Start a scripted S3 endpoint on 127.0.0.1; return its script and a store using it."""
    stores: list[S3Store] = []

    def start(*replies: Reply, max_attempts: int = 1, read_timeout: float = 5) -> tuple[Script, S3Store]:
        script, endpoint = servers.start(*replies, fallback=s3_reply(500, code="UnexpectedRequest"))
        store = S3Store(
            bucket="bucket",
            prefix="q",
            endpoint_url=endpoint,
            region="us-east-1",
            max_attempts=max_attempts,
            read_timeout=read_timeout,
        )
        stores.append(store)
        return script, store

    with ScriptedServers() as servers:
        yield start
        for store in stores:
            store.close()


Scripted = Callable[..., tuple[Script, S3Store]]


def list_page(keys: list[str], next_token: str | None) -> Reply:
    contents = "".join(f"<Contents><Key>{key}</Key><Size>0</Size></Contents>" for key in keys)
    more = f"<IsTruncated>true</IsTruncated><NextContinuationToken>{next_token}</NextContinuationToken>"
    body = (
        '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Name>bucket</Name><Prefix>q/</Prefix><KeyCount>{len(keys)}</KeyCount><MaxKeys>1000</MaxKeys>"
        f"{more if next_token else '<IsTruncated>false</IsTruncated>'}{contents}</ListBucketResult>"
    )
    return s3_reply(200, body=body.encode(), content_type="application/xml")


