"""The pure parts of jobengine.webhooks: signatures (checked against the standardwebhooks package), inbound
requests in both styles, secrets sealed at rest, SSRF address rules, the retry schedule and answer verdicts,
filters, validation and settings."""

from __future__ import annotations

import ipaddress
import random
import socket
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from standardwebhooks.webhooks import Webhook

from jobengine.core.models import Event
from jobengine.core.webhooks import signing
from jobengine.core.webhooks.addresses import AddressPolicy, literal_ip, refused
from jobengine.core.webhooks.model import EventFilter, InvalidWebhook, check_filter, check_rate, check_url_syntax
from jobengine.core.webhooks.policy import (
    GONE,
    RETRY,
    SUCCESS,
    RetrySchedule,
    judge,
    next_attempt_at,
    parse_retry_after,
)
from jobengine.errors import ConfigError
from jobengine.secretbox import PREFIX, SecretBox, key_id, new_key
from jobengine.settings import Settings
from jobengine.webhooks.ssrf import check_url


def test_signature_matches_the_standard_webhooks_library() -> None:
    secret = signing.new_secret()
    body = '{"type":"job.succeeded","data":{"n":1}}'
    now = int(datetime.now(UTC).timestamp())
    headers = signing.headers("wd_1", now, body, (secret,))
    assert Webhook(secret).verify(body, headers) == {"type": "job.succeeded", "data": {"n": 1}}
    assert signing.sign(secret, "wd_1", now, body) == Webhook(secret).sign(
        "wd_1", datetime.fromtimestamp(now, UTC), body
    )
    other = signing.new_secret()
    rotated = signing.headers("wd_1", now, body, (other, secret))
    for s in (secret, other):  # during a rotation both secrets verify
        Webhook(s).verify(body, rotated)
    with pytest.raises(InvalidWebhook, match="secret"):
        signing.secret_key("whsec_short")


def test_inbound_signature() -> None:
    good = signing.inbound_signature("s3cret-s3cret-s3cret", b"body")
    assert good.startswith("sha256=") and signing.verify_inbound("s3cret-s3cret-s3cret", b"body", good)
    assert not signing.verify_inbound("s3cret-s3cret-s3cret", b"body!", good)
    assert not signing.verify_inbound("s3cret-s3cret-s3cret", b"body", None)
    assert not signing.verify_inbound("s3cret-s3cret-s3cret", b"body", "sha1=abc")


def test_inbound_requests_in_either_style() -> None:
    secret, body = signing.new_secret(), b'{"ref":"main"}'
    now = datetime.now(UTC)
    sw = {"webhook-id": "msg_1", "webhook-timestamp": str(int(now.timestamp())),
          "webhook-signature": "v1,bm90IHRoaXMgb25l " + Webhook(secret).sign("msg_1", now, body.decode())}  # fmt: skip
    proof = signing.verify_inbound_request(secret, body, sw)
    assert proof == signing.InboundProof("msg_1", int(now.timestamp()))  # any of the signatures may match
    hexed = signing.inbound_signature(secret, body)
    for header in ("x-scheduler-signature", "x-signature"):
        assert signing.verify_inbound_request(secret, body, {header: hexed.upper().replace("SHA256", "sha256")}) == (
            signing.InboundProof("sha256:" + hexed.removeprefix("sha256="))
        )
    refused = [
        {},
        {**sw, "webhook-signature": "v2," + sw["webhook-signature"].split(",")[-1]},  # an unknown version
        {**sw, "webhook-timestamp": "1e9"}, {**sw, "webhook-timestamp": "²"}, {**sw, "webhook-id": ""},
        {**sw, "webhook-id": "id with spaces"}, {"x-signature": "sha1=" + hexed[7:]},
        # Standard Webhooks headers, when present, are the only ones that count: no fall-back to a hex one.
        {**sw, "webhook-signature": "v1,AAAA", "x-scheduler-signature": hexed},
    ]  # fmt: skip
    for headers in refused:
        assert signing.verify_inbound_request(secret, body, headers) is None, headers
    assert signing.verify_inbound_request(secret, body + b" ", sw) is None


def test_secret_box_seals_opens_and_rotates() -> None:
    first, second = new_key(), new_key()
    old = SecretBox([first])
    sealed = old.seal("whsec_x")
    assert sealed.startswith(f"{PREFIX}{key_id(first)}:") and "whsec_x" not in sealed
    assert old.open(sealed) == "whsec_x" and old.seal("whsec_x") != sealed  # a fresh token every time
    both = SecretBox([second, first])  # rotating: the new key seals, the old one still opens
    assert both.open(sealed) == "whsec_x" and both.stale(sealed) and not both.stale(both.seal("y"))
    assert both.stale("clear text") and both.open("clear text") == "clear text"  # written before sealing
    with pytest.raises(ConfigError, match=f"secret_keys: a stored secret is sealed with key {key_id(first)}"):
        SecretBox([second]).open(sealed)
    tampered = sealed[:-6] + ("A" if sealed[-6] != "A" else "B") + sealed[-5:]
    with pytest.raises(ConfigError, match="does not authenticate"):
        old.open(tampered)
    empty = SecretBox([])
    with pytest.raises(ConfigError, match="secret_keys: no key is set"):
        empty.seal("x")
    assert empty.stale("clear") and not empty.stale(sealed) and empty.open("clear") == "clear"
    with pytest.raises(ConfigError, match="secret_keys: key 1 is not 32 bytes"):
        SecretBox(["not-a-key"])
    loads: list[int] = []
    lazy = SecretBox(lambda: loads.append(1) or [first])  # a key file is read on first use only
    assert loads == [] and lazy.open(sealed) == "whsec_x" and lazy.open(sealed) == "whsec_x" and loads == [1]


@pytest.mark.parametrize(
    ("host", "address"),
    [("2130706433", "127.0.0.1"), ("0x7f000001", "127.0.0.1"), ("0177.0.0.1", "127.0.0.1"), ("127.1", "127.0.0.1"),
     ("[::1]", "::1"), ("10.0.0.1", "10.0.0.1"), ("::ffff:127.0.0.1", "::ffff:127.0.0.1")],
)  # fmt: skip
def test_literal_ip_forms(host: str, address: str) -> None:
    assert literal_ip(host) == ipaddress.ip_address(address)


def test_numeric_hosts_read_as_the_c_library_reads_them() -> None:
    """The pure reading of numeric hosts agrees with ``inet_aton`` (what a resolver connects to) on every
    form: decimal, octal, hex, one to four parts, overflowing parts, bad octal digits, a bare ``0x``."""
    pieces = ["0", "00", "07", "08", "0x", "0X", "0x0", "0xff", "0x100", "0xFFFFFFFF", "0x100000000", "255",
              "256", "65535", "65536", "16777215", "16777216", "4294967295", "4294967296", "0377", "0400",
              "99999999999999999999999"]  # fmt: skip
    rnd = random.Random(7)
    for _ in range(20_000):
        host = ".".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 4)))
        try:
            expected: ipaddress.IPv4Address | None = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            expected = None
        if expected is not None and str(expected) != host:
            assert literal_ip(host) == expected, host
        elif expected is None:
            with pytest.raises(InvalidWebhook):
                literal_ip(host)


def test_names_are_not_literals_and_bad_numbers_are_refused() -> None:
    assert literal_ip("example.com") is None and literal_ip("1e100.net") is None
    with pytest.raises(InvalidWebhook):
        literal_ip("999999999999")


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.1.1.1", "172.16.0.1", "192.168.1.1", "169.254.169.254", "0.0.0.0", "224.0.0.1", "::1",
     "fe80::1", "fc00::1", "::ffff:10.0.0.1", "2002:7f00:1::", "100.64.0.1", "255.255.255.255"],
)  # fmt: skip
def test_refused_addresses(address: str) -> None:
    assert refused(ipaddress.ip_address(address)) is not None


def test_public_addresses_and_the_allow_list() -> None:
    assert refused(ipaddress.ip_address("93.184.216.34")) is None
    assert refused(ipaddress.ip_address("2606:2800:220:1::")) is None
    policy = AddressPolicy.from_entries(["127.0.0.1/32", "dev.local"])
    assert policy.address_allowed(ipaddress.ip_address("127.0.0.1"))
    assert not policy.address_allowed(ipaddress.ip_address("127.0.0.2"))
    assert "dev.local" in policy.hosts
    with pytest.raises(ValueError, match="CIDR"):
        AddressPolicy.from_entries(["10.0.0.0/33"])


async def test_check_url_connects_to_the_checked_address() -> None:
    async def resolver(host: str, port: int) -> list[str]:
        return ["93.184.216.34"]

    target = await check_url("https://hooks.example.com:8443/in?x=1", AddressPolicy(), resolver)
    assert target.connect_url == "https://93.184.216.34:8443/in?x=1"
    assert target.host_header == "hooks.example.com:8443" and target.host == "hooks.example.com"


def test_url_syntax() -> None:
    for bad in ("ftp://x.com/", "http:///nohost", "http://u:p@x.com/", "not a url", "http://x.com:0/", 5):
        with pytest.raises(InvalidWebhook) as exc:
            check_url_syntax(bad)
        assert exc.value.field == "url"


def test_retry_schedule_and_verdicts() -> None:
    s = RetrySchedule(base=1.0, factor=2.0, max_delay=5.0, window=20.0, jitter=0.0)
    assert [s.delay(n) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    jittery = RetrySchedule(base=10.0, jitter=0.2)
    assert jittery.delay(1, 0.0) == 8.0 and jittery.delay(1, 0.999999) == pytest.approx(12.0, abs=1e-4)
    assert judge(204, {}, 0).kind == SUCCESS
    assert judge(410, {}, 0).kind == GONE
    assert judge(301, {}, 0).kind == RETRY and judge(None, {}, 0).kind == RETRY
    assert judge(503, {"retry-after": "7"}, 0).retry_after == 7.0
    assert judge(500, {"retry-after": "7"}, 0).retry_after is None  # only 429 and 503
    now = 1_700_000_000.0
    date = format_datetime(datetime.fromtimestamp(now + 30, UTC), usegmt=True)
    assert parse_retry_after(date, now) == pytest.approx(30.0)
    assert parse_retry_after("soon", now) is None
    retry = judge(429, {"retry-after": "3"}, now)
    assert next_attempt_at(s, retry, 1, now, now, 0.5) == now + 3
    assert next_attempt_at(s, judge(500, {}, now), 1, now - 19.5, now, 0.5) is None  # past the window: give up
    assert next_attempt_at(s, judge(200, {}, now), 1, now, now, 0.5) is None


def test_filters_and_validation() -> None:
    ev = Event(1, 0.0, "job.dead", "acme", None, "emails", "send", {})
    assert EventFilter().matches(ev)
    assert EventFilter(("job.*",), ("emails",), ("send",)).matches(ev)
    assert not EventFilter(("job.succeeded",)).matches(ev)
    assert not EventFilter((), ("other",)).matches(ev)
    assert check_filter({"types": ["job.*", "job.*"]}).types == ("job.*",)
    for bad, field in [({"types": "job.*"}, "filter.types"), ({"nope": []}, "filter.nope"),
                       ({"tasks": ["a b"]}, "filter.tasks")]:  # fmt: skip
        with pytest.raises(InvalidWebhook) as exc:
            check_filter(bad)
        assert exc.value.field == field
    with pytest.raises(InvalidWebhook, match="rate_window"):
        check_rate(5, 0.0)


def test_settings() -> None:
    s = Settings.from_mapping({}, {"JOBENGINE_WEBHOOK_ALLOW_HOSTS": "127.0.0.1/32,localhost",
                                   "JOBENGINE_WEBHOOK_RATE_LIMIT": "10"})  # fmt: skip
    assert s.webhook_allow_hosts == ("127.0.0.1/32", "localhost") and s.webhook_rate_limit == 10
    assert (s.webhook_rate_limit, Settings().webhook_rate_window) == (10, 60.0)
    for values, field in [({"webhook_rate_limiter": "memcached"}, "webhook_rate_limiter"),
                          ({"webhook_rate_limiter": "redis"}, "webhook_redis_url"),
                          ({"webhook_allow_hosts": ["10.0.0.0/99"]}, "webhook_allow_hosts"),
                          ({"webhook_retry_jitter": 1.5}, "webhook_retry_jitter"),
                          ({"webhook_timeout": 0}, "webhook_timeout"),
                          ({"inbound_max_body_bytes": 10}, "inbound_max_body_bytes"),
                          ({"inbound_tolerance": 0}, "inbound_tolerance"),
                          ({"inbound_replay_window": 500}, "inbound_replay_window"),
                          ({"secret_keys": ["short"]}, "secret_keys")]:  # fmt: skip
        with pytest.raises(ConfigError, match=field):
            Settings.from_mapping(values, {})
