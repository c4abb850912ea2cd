"""Trusted time: RFC 3161 timestamps from an authority the registration card names.

A timestamp token is the authority's signature over a SHA-256 digest and the time it saw it,
so it bounds *when* that digest existed by a clock the operator does not hold. A run whose
approval names an authority (``prereg approve --timestamp-authority URL``) holds three:

* ``approval``: in the approval record, over :func:`approval_data` (the run id and the
  approved commit's parent): the record was written *after* that time, so an approval
  commit dated earlier is backdated;
* ``start``: in ``start.json``, over the approval commit object (its signature included),
  requested before the run id is spent: the approval was signed *before* that time;
* ``attestation``: ``attestation.tsr`` beside the attestation, over its bytes: the run's
  outputs existed by then. The attestation covers ``start.json``, so it was made after the
  start's time.

A verifier checks each against the authority's root certificates in the card and that
``approval <= commit date <= start <= attestation`` (:func:`order_problems`); the same with
``openssl ts -verify`` is in docs/how-to/verify-a-run.sh. Requesting and verifying need
``rfc3161-client`` (the extra ``prereg[sign]``).
"""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime, timedelta, timezone

# The content types of RFC 3161 over HTTP (section 3.4).
QUERY_TYPE = "application/timestamp-query"
REPLY_TYPE = "application/timestamp-reply"
ANSWER_SECONDS = 30  # how long a request waits for the authority

# How far the approval commit's own date may lie before the time its record was stamped:
# the operator's clock may run behind the authority's by this much before the date counts as
# backdated (commit dates have whole seconds; machines drift).
CLOCK_SKEW = timedelta(minutes=5)


class TimestampProblem(ValueError):
    """A token that cannot be had or does not hold; the message says which and why."""


class NoTimestamps(RuntimeError):
    """``rfc3161-client`` is not installed."""


def _client():
    try:
        # rfc3161-client: the sign extra, optional (only an approval naming an authority needs it)
        import rfc3161_client
        from cryptography import x509
    except ImportError:
        raise NoTimestamps(
            "timestamps need the package rfc3161-client: pip install 'prereg[sign]'"
        ) from None
    return rfc3161_client, x509


def approval_data(run_id: str, anchor: str) -> bytes:
    """What an approval record's token is over: the run id and the commit it approves."""
    return f"prereg-approval {run_id} {anchor}\n".encode()


def encode(token: bytes) -> str:
    return base64.b64encode(token).decode("ascii")


def decode(text: object, where: str) -> bytes:
    """The token :func:`encode` wrote at ``where``; TimestampProblem when there is none."""
    try:
        if isinstance(text, str) and text:
            return base64.b64decode(text, validate=True)
    except ValueError:
        pass
    raise TimestampProblem(f"{where} is missing or not a base64 timestamp token")


def request(url: str, data: bytes) -> bytes:
    """The authority's reply (DER ``TimeStampResp``) over SHA-256 of ``data``, checked: granted,
    for this digest and this request's nonce."""
    # urllib.request (http.client, email, ssl): only a run or an approval that asks an
    # authority loads it; every process of the plugin imports this module
    import urllib.error
    import urllib.request

    client, _ = _client()
    query = client.TimestampRequestBuilder(
        data, hash_algorithm=client.HashAlgorithm.SHA256, nonce=True, cert_req=True
    ).build()
    asked = urllib.request.Request(
        url, data=query.as_bytes(), headers={"Content-Type": QUERY_TYPE}, method="POST"
    )
    try:
        with urllib.request.urlopen(asked, timeout=ANSWER_SECONDS) as answer:
            reply = answer.read()
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise TimestampProblem(f"the timestamp authority {url} cannot be asked: {err}") from None
    try:
        response = client.decode_timestamp_response(reply)
    except ValueError as err:
        raise TimestampProblem(f"{url} answered no timestamp reply: {err}") from None
    if response.status not in (0, 1):  # granted, granted with modifications
        raise TimestampProblem(f"{url} refused the timestamp (PKI status {response.status})")
    info = response.tst_info
    if info.nonce != query.nonce or info.message_imprint.message != hashlib.sha256(data).digest():
        raise TimestampProblem(f"{url} answered a timestamp of another request")
    return reply


def verified_time(reply: bytes, data: bytes, roots_pem: list[str], what: str) -> datetime:
    """The time of ``reply`` once it holds: signed by a certificate for timestamping that
    chains to one of ``roots_pem`` and over SHA-256 of ``data``; else TimestampProblem."""
    client, x509 = _client()
    try:
        response = client.decode_timestamp_response(reply)
        roots = [x509.load_pem_x509_certificate(pem.encode()) for pem in roots_pem]
    except ValueError as err:
        raise TimestampProblem(f"the {what} timestamp cannot be read: {err}") from None
    builder = client.VerifierBuilder()
    for root in roots:
        builder = builder.add_root_certificate(root)
    try:
        builder.build().verify_message(response, data)
    except (client.VerificationError, ValueError) as err:
        raise TimestampProblem(f"the {what} timestamp does not hold: {err}") from None
    return response.tst_info.gen_time.astimezone(timezone.utc)


def time_of(reply: bytes) -> datetime | None:
    """The time a reply states, unverified (for a report), or None."""
    try:
        client, _ = _client()
        return client.decode_timestamp_response(reply).tst_info.gen_time.astimezone(timezone.utc)
    except (NoTimestamps, ValueError):
        return None


def order_problems(
    approval: datetime, committed: datetime, start: datetime, attested: datetime
) -> list[str]:
    """Where the times disagree with ``approval <= commit date <= start <= attestation``
    (the commit date may lie :data:`CLOCK_SKEW` either side: it is the operator's clock)."""
    found = []
    if committed < approval - CLOCK_SKEW:
        found.append(
            f"the approval commit is dated {_shown(committed)}, before its record was stamped "
            f"at {_shown(approval)}: the approval is backdated"
        )
    if committed > start + CLOCK_SKEW:
        found.append(
            f"the approval commit is dated {_shown(committed)}, after the run's start was "
            f"stamped at {_shown(start)}"
        )
    if start < approval:
        found.append("the run's start was stamped before its approval record")
    if attested < start:
        found.append("the attestation was stamped before the run's start")
    return found


def _shown(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
