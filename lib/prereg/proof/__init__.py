"""Proof a third party checks without prereg: who approved, who ran, what the run wrote.

* :mod:`~prereg.proof.keys`: OpenSSH public keys, their fingerprints, allowed-signers files
  and the three role files under ``.prereg/`` (approvers, runners, auditors);
* :mod:`~prereg.proof.commits`: git's SSH signature of a commit, judged against a role
  file, and the rule that a role file changes only in a commit an approver signed;
* :mod:`~prereg.proof.dsse`: DSSE envelopes signed with an ed25519 runner key;
* :mod:`~prereg.proof.statement`: the run's in-toto statements (SLSA Provenance v1 and
  Test Result v0.1), built from its run folder;
* :mod:`~prereg.proof.card`: the registration card a researcher publishes outside the
  repository, the anchor a verifier trusts;
* :mod:`~prereg.proof.attest`: writing a run's attestation at its end, and the audit's
  judgement of it;
* :mod:`~prereg.proof.vsa`: the auditor's signed verification summary of a run;
* :mod:`~prereg.proof.witness`: a bare repository that records each spent run id once;
* :mod:`~prereg.proof.timestamp`: RFC 3161 tokens that bound when the approval and the
  attestation existed, by an authority's clock;
* :mod:`~prereg.proof.who`: who approved, ran and audited, by the keys that signed;
* :mod:`~prereg.proof.verify`: ``prereg verify``, the whole chain from the card.

docs/reference/attestation.md is the contract of the formats; docs/how-to/verify-a-run.md
gives the same checks as plain git, ssh-keygen, openssl, jq and sha256sum commands.
"""
