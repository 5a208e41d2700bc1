"""A planted-secret corpus: fake credentials of each kind inside realistic text.

Every secret is random characters in the right shape, made from a seed: none
is a real credential. Each `Plant` says the kind and the exact secret text
that must not survive redaction.
"""

from __future__ import annotations

import base64
import json
import random
import string
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

_ALNUM = string.ascii_letters + string.digits
_UPPER32 = string.ascii_uppercase + "234567"
_B64 = _ALNUM + "+/"


@dataclass(frozen=True)
class Plant:
    """One planted secret: its kind, the secret, and the text holding it."""

    kind: str
    secret: str
    text: str


def _pick(rng: random.Random, alphabet: str, count: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(count))


def _pem(rng: random.Random, label: str) -> tuple[str, str]:
    body = base64.b64encode(rng.randbytes(rng.choice((600, 900, 1200)))).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    block = "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"])
    return block, lines[1]


def _jwt(rng: random.Random) -> str:
    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=")
    claims = {"sub": _pick(rng, _ALNUM, 12), "iat": rng.randrange(10**9, 2 * 10**9)}
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=")
    signature = base64.urlsafe_b64encode(rng.randbytes(32)).rstrip(b"=")
    return b".".join((header, payload, signature)).decode()


# kind -> a maker of (secret, the line or block that shows it)
def _makers() -> dict[str, Callable[[random.Random], tuple[str, str]]]:
    def token(
        prefix: str, alphabet: str, count: int, shown: str
    ) -> Callable[..., tuple[str, str]]:
        def make(rng: random.Random) -> tuple[str, str]:
            secret = prefix + _pick(rng, alphabet, count)
            return secret, shown.format(secret)

        return make

    def value(
        shown: str, alphabet: str = _ALNUM, count: int = 20
    ) -> Callable[..., tuple[str, str]]:
        def make(rng: random.Random) -> tuple[str, str]:
            secret = _pick(rng, alphabet, count - 2) + rng.choice("0123456789") + "x"
            return secret, shown.format(secret)

        return make

    def pem(label: str) -> Callable[[random.Random], tuple[str, str]]:
        def make(rng: random.Random) -> tuple[str, str]:
            block, line = _pem(rng, label)
            return line, block

        return make

    def jwt(shown: str) -> Callable[[random.Random], tuple[str, str]]:
        def make(rng: random.Random) -> tuple[str, str]:
            secret = _jwt(rng)
            return secret, shown.format(secret)

        return make

    def gcp_json(rng: random.Random) -> tuple[str, str]:
        block, line = _pem(rng, "PRIVATE KEY")
        key_id = _pick(rng, "0123456789abcdef", 40)
        doc = {
            "type": "service_account",
            "project_id": "demo-123",
            "private_key_id": key_id,
            "private_key": block + "\n",
            "client_email": "ci@demo-123.iam.gserviceaccount.com",
        }
        return line, json.dumps(doc, indent=2)

    return {
        "aws-access-key-id": token("AKIA", _UPPER32, 16, "aws_access_key_id = {}"),
        "aws-secret-key": value("aws_secret_access_key = {}", _B64, 40),
        "gcp-service-account": gcp_json,
        "gcp-api-key": token("AIza", _ALNUM + "_-", 35, "GOOGLE_API_KEY={}"),
        "azure-storage-key": token(
            "",
            _B64,
            86,
            "DefaultEndpointsProtocol=https;AccountName=demo;AccountKey={}==;"
            "EndpointSuffix=core.windows.net",
        ),
        "github-token": token("ghp_", _ALNUM, 36, "remote: using token {}"),
        "github-oauth": token("gho_", _ALNUM, 36, '  "oauth_token": "{}",'),
        "gitlab-token": token("glpat-", _ALNUM, 20, "GITLAB_TOKEN={}"),
        "slack-token": token(
            "xoxb-2468013579-1357924680-", _ALNUM, 24, "SLACK_BOT_TOKEN={}"
        ),
        "stripe-key": token("sk_live_", _ALNUM, 24, "stripe.api_key = '{}'"),
        "openai-api-key": token("sk-proj-", _ALNUM + "_-", 120, "OPENAI_API_KEY={}"),
        "anthropic-api-key": token("sk-ant-api03-", _ALNUM + "_-", 93, "x-api-key: {}"),
        "private-key": pem("RSA PRIVATE KEY"),
        "openssh-key": pem("OPENSSH PRIVATE KEY"),
        "jwt": jwt("Set-Cookie: session={}; Path=/; HttpOnly"),
        "authorization-header": value("> Authorization: Bearer {}", _ALNUM, 32),
        "basic-auth": value("Authorization: Basic {}", _ALNUM, 28),
        "url-password": value(
            "connecting to postgresql://app:{}@db.internal:5432/app", _ALNUM, 14
        ),
        "secret-assignment": value("DB_PASSWORD={}", _ALNUM + "!#%", 16),
        "api-key-assignment": value(
            '{{"api_key": "{}", "region": "eu-west-1"}}', _ALNUM, 24
        ),
        "token-flag": value("+ deploy --token={} --env prod", _ALNUM, 20),
    }


KINDS = tuple(_makers())


def _log_lines(rng: random.Random, count: int) -> list[str]:
    words = ("GET", "POST", "200", "404", "cache", "miss", "worker", "started", "ok")
    return [
        f"2026-12-02T09:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z INFO "
        + " ".join(rng.choice(words) for _ in range(rng.randrange(3, 9)))
        for _ in range(count)
    ]


def _traceback(shown: str) -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/deploy.py", line 41, in <module>\n'
        "    main()\n"
        '  File "/srv/app/deploy.py", line 12, in main\n'
        f"    raise RuntimeError({shown!r})\n"
        f"RuntimeError: {shown}"
    )


def _env_dump(rng: random.Random, shown: str) -> str:
    env = [
        "HOME=/home/ci",
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "LANG=C.UTF-8",
        f"HOSTNAME=runner-{rng.randrange(10**6)}",
        "CI=true",
        shown,
        "PWD=/builds/app",
        "SHLVL=1",
    ]
    return "\n".join(env)


def _json_doc(shown: str) -> str:
    return json.dumps({"level": "debug", "event": "config loaded", "detail": shown})


def planted(seed: int = 20, per_kind: int = 8) -> list[Plant]:
    """Return `per_kind` plants of each kind, in a log, env dump, JSON or traceback."""
    rng = random.Random(seed)  # noqa: S311 - fake secrets, reproducible by design
    makers = _makers()
    plants: list[Plant] = []
    for kind, make in makers.items():
        for round_ in range(per_kind):
            secret, shown = make(rng)
            setting = round_ % 4
            if "\n" in shown or setting == 0:
                lines = _log_lines(rng, 6)
                text = "\n".join([*lines[:3], shown, *lines[3:]])
            elif setting == 1:
                text = _env_dump(rng, shown)
            elif setting == 2:
                text = "\n".join([*_log_lines(rng, 2), _json_doc(shown)])
            else:
                text = _traceback(shown)
            plants.append(Plant(kind, secret, text))
    return plants


def fake_secret(kind: str, seed: int) -> tuple[str, str]:
    """Return one (secret, line or block showing it) of `kind`."""
    return _makers()[kind](random.Random(seed))  # noqa: S311 - fake, reproducible
