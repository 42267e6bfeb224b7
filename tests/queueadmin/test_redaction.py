"""Payload values under secret-looking keys (queueadmin.dashboard.redaction):
which keys, at what depth, on whole JSON and on the start of a JSON text cut
anywhere (a finished job's record), with properties checked by Hypothesis."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from django.core.exceptions import ImproperlyConfigured
from hypothesis import given, settings
from hypothesis import strategies as st

from queueadmin.dashboard.redaction import SUBSTITUTE, hides, is_secret, redact, redact_error, redact_text, words
from queueadmin.dashboard.snapshot import error_signature

HIDDEN = SUBSTITUTE


@pytest.mark.parametrize(("key", "normalised"), [
    ("apiKey", "api_key"), ("api-key", "api_key"), ("API_KEY", "api_key"), ("api key", "api_key"),
    ("HTTPAuthorization", "http_authorization"), ("clientSecret", "client_secret"), ("x", "x"), ("", ""),
])
def test_keys_are_read_as_lower_case_words(key: str, normalised: str) -> None:
    assert words(key) == normalised


@pytest.mark.parametrize("key", [
    "password", "Password", "db_password", "pass", "passwd", "passphrase", "secret", "client_secret", "secrets",
    "token",
    "accessToken", "refresh_token", "apiKey", "api_key", "API-KEY", "apikey", "access_key", "privateKey", "auth",
    "Authorization", "credentials", "cookie", "session_id", "sessionId", "signature", "otp", "pin", "cvv",
    "card_number", "cardNumber", "ssn", "iban",
])
def test_secret_looking_keys(key: str) -> None:
    assert is_secret(key)


@pytest.mark.parametrize("key", [
    "to", "email", "author", "authored_at", "passenger", "keyboard", "monkey", "tokenizer", "pinned", "spin",
    "id", "idempotency_key_hint", "queue", "card",
])
def test_ordinary_keys(key: str) -> None:
    # A key shows unless one of its words is a secret's: "author" is not "auth",
    # "passenger" is not "pass". ("idempotency_key_hint": "key" alone is not a secret word.)
    assert not is_secret(key), key


def test_every_value_under_a_secret_key_is_hidden_at_any_depth_whatever_its_type() -> None:
    payload = {"to": "ada@example.com", "apiKey": "sk_live_1", "nested": {"password": {"a": [1, 2]}, "n": 3},
               "items": [{"token": 42}, {"token": None}, "token"], "secret": ["x"]}
    assert redact(payload) == {"to": "ada@example.com", "apiKey": HIDDEN, "nested": {"password": HIDDEN, "n": 3},
                               "items": [{"token": HIDDEN}, {"token": HIDDEN}, "token"], "secret": HIDDEN}
    assert payload["apiKey"] == "sk_live_1"  # a copy: the job itself is untouched
    assert hides(payload)


def test_a_payload_with_nothing_to_hide_is_returned_as_is() -> None:
    for payload in ({"to": "ada", "n": [1, {"m": 2}]}, [1, "password"], "token", 3, None):
        assert redact(payload) is payload and not hides(payload)


def test_the_pattern_is_a_setting(settings: Any) -> None:
    settings.QUEUE_PAYLOAD_SECRET_KEYS = r"(^|_)iban(_|$)"
    assert redact({"iban": "DE00", "password": "p"}) == {"iban": HIDDEN, "password": "p"}
    settings.QUEUE_PAYLOAD_SECRET_KEYS = r"(unclosed"
    with pytest.raises(ImproperlyConfigured, match="QUEUE_PAYLOAD_SECRET_KEYS is not a regular expression"):
        redact({"a": 1})


def test_the_start_of_a_cut_payload_hides_a_value_cut_short() -> None:
    text = '{"to": "ada", "password": "hunter2-and-mo'
    assert redact_text(text) == f'{{"to": "ada", "password": "{HIDDEN}"'
    nested = '{"auth": {"user": "u", "pass": "p"'
    assert redact_text(nested) == f'{{"auth": "{HIDDEN}"'
    assert redact_text('{"to": "ada", "pass') == '{"to": "ada", "pass'  # the key itself cut: no value yet
    assert redact_text('{"a": "b\\"token\\": c", "token": [1, "]", {"x": "}"}], "z": 1}') == (
        f'{{"a": "b\\"token\\": c", "token": "{HIDDEN}", "z": 1}}')


# -- properties -----------------------------------------------------------------------------

KEYS = st.sampled_from(["to", "n", "password", "apiKey", "items", "auth", "note", "x y", 'q"uote'])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(JSON, st.booleans())
def test_on_whole_json_the_text_and_the_value_redactions_agree(value: Any, indent: bool) -> None:
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2 if indent else 0).decode()
    assert orjson.loads(redact_text(text)) == redact(value)


MARK = "Q7xSECRET"


@settings(max_examples=300, deadline=None)
@given(JSON, st.text(max_size=8), st.booleans(), st.data())
def test_no_prefix_of_a_payload_shows_any_of_a_secret_value(value: Any, tail: str, indent: bool,
                                                            data: st.DataObject) -> None:
    secret = MARK + tail
    payload = {"before": value, "password": {"inner": [secret, {"k": secret}]}, "apiKey": secret}
    text = orjson.dumps(payload, option=orjson.OPT_INDENT_2 if indent else 0).decode()
    cut = data.draw(st.integers(0, len(text)))
    assert MARK[:3] not in redact_text(text[:cut]).replace(orjson.dumps(value).decode(), "")


# -- error texts ---------------------------------------------------------------------------------

S = "s3cr3tVALUE"


@pytest.mark.parametrize(("text", "shown"), [
    (f"HTTPError: 401 for url: https://api.example.com/v1?api_key={S}&page=2",
     f"HTTPError: 401 for url: https://api.example.com/v1?api_key={HIDDEN}&page=2"),
    (f'OperationalError: connection to "postgres://app:{S}@db:5432/x" failed',
     f'OperationalError: connection to "postgres://app:{HIDDEN}@db:5432/x" failed'),
    (f"KeyError: password={S}, user=ada", f"KeyError: password={HIDDEN}, user=ada"),
    (f"ValueError: {{'token': '{S}', 'n': 1, \"apiKey\": \"{S} x\"}}",
     f"ValueError: {{'token': '{HIDDEN}', 'n': 1, \"apiKey\": \"{HIDDEN}\"}}"),
    (f"refused: Authorization: Bearer {S}.{S}", f"refused: Authorization: {HIDDEN}"),
    (f"x-api-key:   '{S}' sent", f"x-api-key:   '{HIDDEN}' sent"),
    (f"db.password={S}", f"db.password={HIDDEN}"),
    # An unquoted value with spaces in it is the secret, up to the next pair or delimiter.
    (f"LoginError: passphrase=correct horse {S} staple user=ada", f"LoginError: passphrase={HIDDEN} user=ada"),
    (f"login failed (password: two words {S}); retry", f"login failed (password: {HIDDEN}); retry"),
    (f"bad secret = {S} {S}\nnext line", f"bad secret = {HIDDEN}\nnext line"),
    # An Azure SAS URL in a store error: its signature is the credential.
    (f"StoreUnavailable: GET https://acct.blob.core.windows.net/q/queue.json?sv=2024&sig={S}&se=1 timed out",
     f"StoreUnavailable: GET https://acct.blob.core.windows.net/q/queue.json?sv=2024&sig={HIDDEN}&se=1 timed out"),
])
def test_an_error_texts_secret_values_are_hidden(text: str, shown: str) -> None:
    assert redact_error(text) == shown


@pytest.mark.parametrize("text", [
    "Timeout: 30s", "KeyError: 'user'", "auth.py: line 3", "ZeroDivisionError: division by zero",
    "https://example.com:8443/path@v2", "password=", "user=ada, n=3", "(no error text)",
])
def test_error_texts_without_secret_values_are_unchanged(text: str) -> None:
    assert redact_error(text) == text


def test_a_tracebacks_source_lines_stay_as_written() -> None:
    traceback = ('Traceback (most recent call last):\n  File "/app/pay.py", line 3, in charge\n'
                 f'    token = "{S}"\nRuntimeError: token={S}')
    assert redact_error(traceback) == traceback.replace(f"token={S}", f"token={HIDDEN}")


def test_a_frame_without_source_does_not_shield_the_exception_line_after_it() -> None:
    """Code run from a string, or a C extension, has no source line: the
    exception's own line comes right after the frame's."""
    traceback = f'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\nRuntimeError: token={S}'
    assert redact_error(traceback) == traceback.replace(f"token={S}", f"token={HIDDEN}")


def test_the_error_signature_hides_secret_values_for_everyone() -> None:
    assert error_signature(f"x\nKeyError: password={S}, user 12") == f"KeyError: password={HIDDEN}, user N"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["password", "api_key", "apiKey", "X-Auth-Token", "client_secret", "sessionId"]),
       st.sampled_from(["=", ": ", ":", " = "]), st.sampled_from(['"', "'", ""]),
       st.text(alphabet="abcdefXYZ0123456789_-.+/", min_size=1, max_size=20),
       st.text(alphabet="abc xyz,;()", max_size=12), st.text(alphabet="abc xyz,;()", max_size=12))
def test_a_secret_value_after_its_name_never_shows(name: str, sep: str, quote: str, value: str, before: str,
                                                   after: str) -> None:
    secret = "SECRET" + value
    text = f"{before} {name}{sep}{quote}{secret}{quote}{after}"
    shown = redact_error(text)
    assert secret not in shown and HIDDEN in shown
    assert redact_error(shown) == shown  # hiding twice hides nothing more


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["password", "api_key", "client_secret", "passphrase"]), st.sampled_from(["=", ": ", " = "]),
       st.lists(st.text(alphabet="abcXYZ0123_-./+", min_size=1, max_size=8), min_size=2, max_size=5),
       st.sampled_from([" user=ada", ", user ada", "; retry", "\nnext"]))
def test_every_word_of_an_unquoted_secret_value_is_hidden(name: str, sep: str, words: list[str], after: str) -> None:
    """A passphrase is several words: each one is hidden, and what follows
    the value (another pair, a delimiter, the next line) is kept."""
    secret = ["SECRET" + word for word in words]
    shown = redact_error(f"LoginError: {name}{sep}{' '.join(secret)}{after}")
    assert not [word for word in secret if word in shown] and shown.endswith(after) and HIDDEN in shown


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters=":=@", blacklist_categories=("Cs",)), max_size=60))
def test_text_with_no_name_value_pair_and_no_url_password_is_unchanged(text: str) -> None:
    assert redact_error(text) == text
