"""``manage.py queuetoken``: make, list and revoke database API tokens."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from queueadmin.models import ApiToken


def queuetoken(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("queuetoken", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_prints_the_token_once_and_stores_only_its_digest_and_scope(db: None) -> None:
    out, err = queuetoken("create", "billing producers", "--queues", "billing", "billing-*", "--push-only")
    token = out.strip()
    row = ApiToken.objects.get()
    assert row.digest == ApiToken.digest_of(token) and token not in (row.digest, row.hint)
    assert (row.queues, row.may_push, row.may_work) == ("billing billing-*", True, False)
    assert "push · billing billing-*" in err and token not in err


def test_create_without_limits_may_do_everything(db: None) -> None:
    queuetoken("create", "ops")
    row = ApiToken.objects.get()
    assert (row.queues, row.may_push, row.may_work) == ("", True, True)
    assert row.scope == "push and work · every queue"


def test_create_refuses_a_bad_pattern_and_makes_nothing(db: None) -> None:
    with pytest.raises(CommandError, match="queues: not a pattern of queue names: mail/eu"):
        queuetoken("create", "bad", "--queues", "billing", "mail/eu")
    assert not ApiToken.objects.exists()


def test_create_refuses_a_name_in_use_and_both_limits_at_once(db: None) -> None:
    queuetoken("create", "fleet")
    with pytest.raises(CommandError, match="already exists"):
        queuetoken("create", "fleet")
    with pytest.raises(CommandError, match="not allowed with argument"):
        queuetoken("create", "nothing", "--push-only", "--work-only")
    assert ApiToken.objects.count() == 1


def test_list_and_revoke(db: None) -> None:
    queuetoken("create", "a", "--work-only")
    queuetoken("create", "b")
    out, _ = queuetoken("revoke", "a")
    assert "revoked 'a'" in out
    rows = queuetoken("list")[0].splitlines()
    assert [r.split("\t")[0] for r in rows] == ["a", "b"]
    assert rows[0].split("\t")[2:] == ["work · every queue", rows[0].split("\t")[3]]
    assert rows[0].split("\t")[3].startswith("revoked ") and rows[1].endswith("\tactive")
    with pytest.raises(CommandError, match="already revoked"):
        queuetoken("revoke", "a")
    with pytest.raises(CommandError, match="no API token is named 'c'"):
        queuetoken("revoke", "c")
