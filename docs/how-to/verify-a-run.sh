#!/usr/bin/env bash
# Verify a prereg run without prereg: git, ssh-keygen, openssl (>= 3.0), jq, base64, sha256sum,
# iconv and coreutils (od, tr, wc, tail).
#
#   bash verify-a-run.sh REPOSITORY RUN_FOLDER CARD [--require-audit]
#
# REPOSITORY: a clone of the project (with its refs/prereg/* fetched, when it has them);
# RUN_FOLDER: runs/<run-id> as the operator handed it over; CARD: the registration card the
# researcher published; --require-audit: also a passing audit an auditor signed. Exit 0:
# verified; 1: refused (the reason on stderr); 3: could not verify (evidence not obtained).
# The same checks as `prereg verify` (docs/how-to/verify-a-run.md), which the conformance
# corpus (checks/support/corpus.py) holds to the same outcome.
set -euo pipefail
unset CDPATH  # a relative path names a folder here, never one CDPATH finds elsewhere
# No GIT_* variable of the environment (GIT_DIR would name another repository), as prereg asks.
for name in $(compgen -e | grep '^GIT_' || true); do unset "$name"; done
repo=$(cd "$1" && pwd); run=$(cd "$2" && pwd); card=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
id=$(basename "$run")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
refuse() { echo "refused: $*" >&2; exit 1; }
# A step that fails outside a check (jq on a field of another type, git on a missing object)
# read something not as prereg writes it: refused, as prereg verify refuses it, never another
# exit status.
set -E; trap 'refuse "line $LINENO of verify-a-run.sh failed on what the run holds"' ERR
# git as prereg asks it: no user or system configuration, nothing the repository's own
# configuration names runs (hooks, another ssh program), SSH signatures checked by ssh-keygen.
g() { GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 git --no-replace-objects -C "$repo" \
      -c core.hooksPath=/dev/null -c gpg.format=ssh -c gpg.ssh.program=ssh-keygen \
      -c gpg.program=false -c gpg.openpgp.program=false -c gpg.x509.program=false "$@"; }
sha() { sha256sum | cut -d' ' -f1; }
# Checks of a JSON document in one jq program: each need(CONDITION; REASON) whose condition
# fails prints its reason; the first is refused.
NEED='def need(c; reason): if c then empty else reason end;'
judge() {  # JQ-ARGUMENTS... : refuse the first reason the program prints
  local reason
  reason=$(jq -r "$@") || refuse "jq could not judge $*"
  [ -z "$reason" ] || refuse "${reason%%$'\n'*}"
}
# A JSON document read as prereg reads it (prereg.records.documents), or refused: UTF-8
# without a byte order mark, one document, no key twice in an object (jq keeps the last, a
# streaming read sees both), no NaN or Infinity (jq would read them as null or a huge number).
doc() {  # FILE NAME
  local not="$2 is not JSON as prereg reads it" written docs events huge deep
  iconv -f UTF-8 -t UTF-8 "$1" > /dev/null 2>&1 || refuse "$not: it is not UTF-8"
  [ "$(head -c 3 "$1" | od -An -tx1 | tr -d ' \n')" != efbbbf ] || refuse "$not: a byte order mark"
  ! sed -E 's/"([^"\\]|\\.)*"//g; s/true|false|null//g; s/[0-9][eE]/0/g' "$1" | grep -q '[A-Za-z]' ||
    refuse "$not: NaN or Infinity"
  # In one read: the stream events as written (a key given twice is two), the documents, the
  # events of the first as jq keeps it (a key given twice is one), numbers too large to be
  # finite, and how deeply arrays and objects nest (prereg.base.hashing.MAX_JSON_DEPTH: 100).
  read -r written docs events huge deep < <(jq -nr --stream '[inputs] as $e | [fromstream($e[])] as $d
    | [($e | length), ($d | length), ([$d[0] | tostream] | length),
      ([$d[0] | .. | numbers | select(. >= 1.7976931348623157e308 or . <= -1.7976931348623157e308)] | length),
      ([$d[0] | (if type == "array" or type == "object" then 1 else 0 end),
        (paths(type == "array" or type == "object") | length + 1)] | max)]
    | @tsv' "$1" 2>/dev/null) || refuse "$not: it does not parse"
  [ "$docs" = 1 ] || refuse "$not: not one JSON document"
  [ "$written" -eq "$events" ] || refuse "$not: a key given twice"
  [ "$huge" = 0 ] || refuse "$not: a number too large to be finite"
  [ "$deep" -le 100 ] || refuse "$not: it nests more than 100 levels deep"
}

# 1. The card: the repository, and the role files and plans at the freeze commit F.
# A commit read from the card or a record is a full object id, never a ref, a short id or an
# option handed to git.
oid() { [[ "$1" =~ ^([0-9a-f]{40}|[0-9a-f]{64})$ ]] || refuse "$2 '$1' is not a full commit id"; }
doc "$card" "the card"
judge "$NEED need(.format == \"prereg-registration/1\"; \"not a registration card\"),
  need(keys - [\"format\", \"repository\", \"freeze_commit\", \"plans\", \"roles\", \"witness\",
    \"timestamp_authority\"] == []; \"the card holds a field prereg does not write\")" "$card"
F=$(jq -r .freeze_commit "$card"); oid "$F" "the card's freeze commit"
g cat-file -e "$F^{commit}" 2>/dev/null || refuse "no freeze commit $F"
roles=()
for role in approvers runners auditors; do
  roles+=(--arg "$role" "$( (g show "$F:.prereg/$role" 2>/dev/null || true) | sha)")
done
judge --arg root "$(g rev-list --max-parents=0 "$F" | tail -1)" "${roles[@]}" "$NEED
  need(.repository == \$root; \"another repository\"),
  (\"approvers\", \"runners\", \"auditors\") as \$r |
    need(.roles[\$r] == \$ARGS.named[\$r]; \".prereg/\\(\$r) at F is not the card's\")" "$card"
g ls-tree -r --name-only "$F" -- plans | grep '\.json$' | grep -v '^plans/approvals/' | sort |
  while read -r p; do printf '%s %s\n' "$p" "$(g show "$F:$p" | sha)"; done > "$tmp/plans"
jq -r '.plans | to_entries | sort_by(.key)[] | "\(.key) \(.value)"' "$card" | cmp -s - "$tmp/plans" ||
  refuse "the plans at F are not the card's"

# 2. The attestation: two DSSE envelopes; the approval commit C the first names.
att="$run/attestation.intoto.jsonl"
[ -f "$att" ] || refuse "$id has no attestation"
# As prereg writes it: two lines, each ended by a line feed, no carriage return (a line
# without its line feed would be one line to wc and read, another to other readers).
[ "$(wc -l < "$att")" -eq 2 ] || refuse "the attestation has not 2 lines"
[ "$(tail -c 1 "$att" | od -An -tx1 | tr -d ' \n')" = 0a ] || refuse "the attestation's last line has no line feed"
! grep -q $'\r' "$att" || refuse "the attestation holds a carriage return"
for n in 1 2; do
  sed -n "${n}p" "$att" > "$tmp/line$n"; doc "$tmp/line$n" "$id/attestation.intoto.jsonl:$n"
  jq -r .payload "$tmp/line$n" | base64 -d > "$tmp/s$n"; doc "$tmp/s$n" "attestation line $n's statement"
done
C=$(jq -er '.predicate.buildDefinition.resolvedDependencies[] | select(.name == "source") | .digest.gitCommit' "$tmp/s1")
oid "$C" "attestation line 1 names the source commit"
g cat-file -e "$C^{commit}" 2>/dev/null || refuse "the attested commit $C is not in the repository"

# 3. Role files change after F only in commits an approver of the parent signed.
g merge-base --is-ancestor "$F" "$C" || refuse "$C does not descend from F"
# A role file read as prereg reads it (prereg.proof.keys.parse_signers), or refused: UTF-8,
# no NUL; lines end with a line feed; blank and # lines skipped; every other line is
# "principal [options] ssh-ed25519 KEY", blanks splitting the fields, a quoted value holding
# no blank, options only namespaces, valid-after and valid-before, each once, with its value.
# Prints "any KEY" or "only:NAMESPACES KEY" for each line.
signers() {  # FILE NAME
  iconv -f UTF-8 -t UTF-8 "$1" > /dev/null 2>&1 || refuse "$2 is not UTF-8 text"
  [ "$(tr -d '\000' < "$1" | wc -c)" -eq "$(wc -c < "$1")" ] || refuse "$2 holds a NUL byte"
  local number=0 line opts type key tok name spaces seen
  local -a f
  while read -r line || [ -n "$line" ]; do
    number=$((number + 1))
    case "$line" in ''|'#'*) continue ;; esac
    case "$(sed 's/"[^"[:blank:]]*"//g' <<<"$line")" in
      *'"'*) refuse "$2:$number: a quoted value holds a blank, or a quote is unpaired" ;;
    esac
    read -r -a f <<<"$line"
    [ "${#f[@]}" -ge 3 ] || refuse "$2:$number: not 'principal [options] keytype key'"
    case "${f[1]}" in
      ssh-*|sk-*) opts=""; type=${f[1]}; key=${f[2]} ;;
      *) opts=${f[1]}; type=${f[2]}; key=${f[3]:-} ;;
    esac
    spaces=any; seen=","
    if [ -n "$opts" ]; then
      [[ "$opts" =~ ^[A-Za-z-]+(=\"[^\"]*\")?(,[A-Za-z-]+(=\"[^\"]*\")?)*$ ]] ||
        refuse "$2:$number: options are not name or name=\"value\" separated by commas"
      while read -r tok; do
        name=$(tr '[:upper:]' '[:lower:]' <<<"${tok%%=*}")
        case "$seen" in *",$name,"*) refuse "$2:$number: option $name given twice" ;; esac
        seen="$seen$name,"
        case "$name" in
          cert-authority) refuse "$2:$number: a certificate authority; a role names keys" ;;
          namespaces|valid-after|valid-before) ;;
          *) refuse "$2:$number: unknown option(s) $name" ;;
        esac
        [ "$tok" != "${tok%%=*}" ] || refuse "$2:$number: option(s) $name without =\"value\""
        if [ "$name" = namespaces ]; then spaces=${tok#*=\"}; spaces=only:${spaces%\"}; fi
      done < <(grep -oE '[A-Za-z-]+(="[^"]*")?' <<<"$opts")
    fi
    [ -n "$key" ] || refuse "$2:$number: no key after the principal and options"
    [ "$type" = ssh-ed25519 ] || refuse "$2:$number: a $type key: prereg's roles take ssh-ed25519 keys only"
    # An ed25519 key blob is 51 bytes, so 68 base64 characters: "ssh-ed25519" and 32 bytes.
    [[ "$key" =~ ^[A-Za-z0-9+/]{68}$ ]] &&
      [ "$(base64 -d <<<"$key" | head -c 19 | od -An -tx1 | tr -d ' \n')" = 0000000b7373682d6564323535313900000020 ] ||
      refuse "$2:$number: its key is not an ssh-ed25519 key"
    printf '%s %s\n' "$spaces" "$key"
  done < "$1"
}
signed_by() {  # commit, the commit whose role file judges it, the role (default approvers)
  g show "$2:.prereg/${3:-approvers}" > "$tmp/allowed" 2>/dev/null || : > "$tmp/allowed"
  signers "$tmp/allowed" ".prereg/${3:-approvers} at $2" > /dev/null
  [ "$(g -c gpg.ssh.allowedSignersFile="$tmp/allowed" log -1 --format=%G? "$1")" = G ]
}
role_history() {  # every change of .prereg/ after $1 up to $2 signed by an approver of its parent
  for c in $(g rev-list --reverse --full-history --topo-order "$1..$2" -- .prereg); do
    [ "$(g rev-list --parents -n 1 "$c" | wc -w)" -eq 2 ] || refuse "role files changed in merge $c"
    signed_by "$c" "$c^" || refuse "commit $c changes .prereg/ and is not signed by an approver"
  done
}
role_history "$F" "$C"

# 4. Each envelope: payloadType, and every signature by a runners key (keyid: its fingerprint,
#    namespace prereg-run) over PAE, checked by openssl.
g show "$C:.prereg/runners" > "$tmp/runners.file" 2>/dev/null || refuse "no .prereg/runners at $C"
signers "$tmp/runners.file" ".prereg/runners at $C" |
  while read -r spaces key; do  # each key with its fingerprint, the keyid a signature names
    echo "$spaces $key $(echo "ssh-ed25519 $key" | ssh-keygen -lf - | cut -d' ' -f2)"
  done > "$tmp/runners"
for n in 1 2; do
  judge "$NEED need(.payloadType == \"application/vnd.in-toto+json\"; \"line $n: payloadType\"),
    need(.signatures | type == \"array\" and length >= 1; \"line $n is not signed\")" "$tmp/line$n"
  len=$(wc -c < "$tmp/s$n")
  { printf 'DSSEv1 28 application/vnd.in-toto+json %d ' "$len"; cat "$tmp/s$n"; } > "$tmp/pae"
  jq -r '.signatures[] | [.keyid, .sig] | @tsv' "$tmp/line$n" > "$tmp/signatures"
  while IFS=$'\t' read -r keyid sig; do
    base64 -d <<<"$sig" > "$tmp/sig"
    found=""
    while read -r spaces key print; do
      [ "$print" = "$keyid" ] || continue
      case "$spaces" in any|only:prereg-run|only:prereg-run,*|only:*,prereg-run|only:*,prereg-run,*) ;;
        *) refuse "line $n: key $keyid may not sign runs" ;;
      esac
      # An ed25519 public key as PEM: a fixed DER prefix, then the blob's last 32 bytes.
      { printf '\x30\x2a\x30\x05\x06\x03\x2b\x65\x70\x03\x21\x00'; base64 -d <<<"$key" | tail -c 32; } > "$tmp/der"
      openssl pkey -pubin -inform DER -in "$tmp/der" -out "$tmp/pem" 2>/dev/null
      openssl pkeyutl -verify -pubin -inkey "$tmp/pem" -rawin -in "$tmp/pae" -sigfile "$tmp/sig" >/dev/null 2>&1 ||
        refuse "line $n: the signature by $keyid does not verify"
      found=1
    done < "$tmp/runners"
    [ -n "$found" ] || refuse "line $n: signed by $keyid, not a key of .prereg/runners"
  done < "$tmp/signatures"
done

# 5. The statements: prereg's types, this run id, exactly the documented parameters.
s1=$tmp/s1; s2=$tmp/s2
judge --arg id "$id" --arg c "$C" --slurpfile two "$s2" "$NEED
  need(._type == \"https://in-toto.io/Statement/v1\" and \$two[0]._type == ._type; \"_type\"),
  need(.predicateType == \"https://slsa.dev/provenance/v1\"; \"line 1 predicateType\"),
  need(\$two[0].predicateType == \"https://in-toto.io/attestation/test-result/v0.1\"; \"line 2 predicateType\"),
  (.predicate.buildDefinition | need(.buildType == \"urn:prereg:attestation:run:v1\"; \"buildType\"),
    need(.externalParameters | keys == [\"approval\",\"pytestArgs\",\"runId\",\"stage\",\"workers\"];
      \"externalParameters\"),
    need(.externalParameters.runId == \$id; \"the statement is for another run\")),
  need(.predicate.runDetails.metadata.invocationId == \$id; \"the statement is for another run\"),
  need(\$two[0].subject == [{name: \"source\", digest: {gitCommit: \$c}}]; \"line 2's subject\")" "$s1"

# 6. Every file of the run folder is a subject with its digest, and every subject a file; an
#    entry that is neither a regular file nor a folder (a symbolic link) is refused, as prereg
#    verify refuses it: nothing follows it.
odd=$(cd "$run" && find . ! -type f ! -type d -print -quit)
[ -z "$odd" ] || refuse "${odd#./} in the run folder is not a regular file or folder"
(cd "$run" && find . -type f ! -path ./attestation.intoto.jsonl ! -path ./attestation.tsr | sed 's|^\./||' | LC_ALL=C sort) > "$tmp/files"
jq -r '.subject[].name' "$s1" | LC_ALL=C sort > "$tmp/subjects"
cmp -s "$tmp/files" "$tmp/subjects" || refuse "the run folder's files are not the attested subjects"
# Each name as ./NAME: sha256sum reads a file named "-" as its standard input otherwise.
jq -r '.subject[] | "\(.digest.sha256)  ./\(.name)"' "$s1" > "$tmp/sums"
(cd "$run" && sha256sum --quiet --strict -c "$tmp/sums" >/dev/null 2>&1) || refuse "a file changed after it was attested"

# 7. The approval commit: signed by an approver, adding exactly the record the statement names.
record=plans/approvals/$id.json
signed_by "$C" "$C^" || refuse "the approval commit $C is not signed by an approver"
[ "$(g diff-tree --no-commit-id --name-status -r --no-renames "$C^" "$C")" = "$(printf 'A\t%s' "$record")" ] ||
  refuse "the approval commit does more than add $record"
rsha=$(g show "$C:$record" | sha)
[ "$(sha < "$run/approval.json")" = "$rsha" ] || refuse "approval.json is not the record at C"
doc "$run/start.json" "$id/start.json"
g show "$C:$record" > "$tmp/record"; doc "$tmp/record" "$record at C"
# The record holds the fields prereg writes and no other (prereg.records.formats.Approval).
judge "$NEED need(keys - [\"format\", \"stage\", \"run_id\", \"plan\", \"baseline\", \"source_anchor\",
  \"seed_namespace\", \"environment\", \"deviations\", \"requires\", \"inputs\", \"approved_at\",
  \"approved_by\", \"extensions\", \"environment_lock\", \"witness\", \"timestamp\", \"rehearsals\",
  \"amendment\"] == []; \"$record at C holds a field prereg does not write\")" "$tmp/record"
# ...each of the shape prereg writes it (prereg.records.formats.Approval and its parts).
judge "$NEED def str: type == \"string\";
  def closed(\$need; \$may): type == \"object\" and (\$need - keys) == [] and (keys - \$need - \$may) == [];
  def strings(\$ks): all(\$ks[] as \$k | .[\$k]; str);
  def map_of(f): type == \"object\" and all(.[]; f);
  def maybe(\$k; f): (has(\$k) | not) or (.[\$k] | f);
  need(strings([\"format\", \"stage\", \"run_id\", \"source_anchor\", \"approved_at\", \"approved_by\"])
    and (.plan | closed([\"path\", \"sha256\", \"plan_id\"]; []) and strings([\"path\", \"sha256\", \"plan_id\"]))
    and (.baseline | closed([\"path\", \"sha256\"]; []) and strings([\"path\", \"sha256\"]))
    and (.seed_namespace | str or . == null) and (.environment | type == \"object\")
    and (.deviations | type == \"array\")
    and (.requires | map_of(closed([\"run_id\", \"manifest_sha256\"]; []) and strings([\"run_id\", \"manifest_sha256\"])))
    and (.inputs | map_of(closed([\"path\", \"kind\", \"sha256\", \"commit\"]; []) and strings([\"path\", \"kind\"])
      and all(.sha256, .commit; str or . == null)))
    and maybe(\"extensions\"; type == \"object\")
    and maybe(\"environment_lock\"; closed([\"python\", \"distributions\"]; [])
      and (.python | closed([\"executable\", \"executable_sha256\", \"version\", \"implementation\", \"prefix\",
        \"base_prefix\"]; [\"sitecustomize_sha256\", \"usercustomize_sha256\"]) and all(.[]; str))
      and (.distributions | map_of(closed([\"version\", \"record_sha256\", \"files\"]; [\"entries\"])
        and strings([\"version\", \"record_sha256\"]) and (.files | type == \"number\" and . == floor)
        and maybe(\"entries\"; map_of(str)))))
    and maybe(\"witness\"; closed([\"url\"]; []) and strings([\"url\"]))
    and maybe(\"timestamp\"; closed([\"url\", \"token\"]; []) and strings([\"url\", \"token\"]))
    and maybe(\"rehearsals\"; type == \"array\" and all(.[]; type == \"object\"))
    and maybe(\"amendment\"; type == \"object\");
    \"$record at C is not an approval record as prereg writes it (a part of another shape)\")" "$tmp/record"
# The record against the statement (a dependency's digest: the first of its name, as prereg
# reads it), start.json, C and the card, in one jq program.
plan=$(jq -r '.plan.path | strings' "$tmp/record")
judge --arg id "$id" --arg c "$C" --arg rsha "$rsha" --arg parent "$(g rev-parse "$C^")" \
  --arg at_c "$( (g show "$C:$plan" 2>/dev/null || true) | sha)" --slurpfile s1 "$s1" \
  --slurpfile start "$run/start.json" --slurpfile card "$card" "$NEED
  \$s1[0].predicate.buildDefinition as \$b | \$start[0] as \$st | \$b.externalParameters.stage as \$stage |
  def dep(\$n): [\$b.resolvedDependencies[] | select(.name == \$n)][0].digest.sha256;
  need(dep(\"$record\") == \$rsha; \"the attested approval record is not $record at C\"),
  need(\$st.approval_sha256 == \$rsha and \$st.source_commit == \$c; \"start.json names another approval or commit\"),
  need(.run_id == \$id; \"the record is for another run\"),
  need(.stage == \$stage and \$st.stage == \$stage; \"another stage\"),
  need(.source_anchor == \$parent; \"source_anchor is not C's parent\"),
  need(.plan.sha256 == \$at_c and dep(.plan.path) == .plan.sha256; \"the plan at C is not the plan approved\"),
  need(\$card[0].plans[.plan.path | strings] == .plan.sha256; \"the plan is not the plan the card registers\")" \
  "$tmp/record"

# 8. The witness the signed record names (the card's, when it registers one) holds this
#    start record: not another (a rerun), not none (it was skipped).
url=$(jq -r '.witness.url // empty' "$tmp/record")
carded=$(jq -r '.witness // empty' "$card")
[ -z "$carded" ] || [ "$url" = "$carded" ] || refuse "the card registers the witness $carded; the approval names ${url:-none}"
if [ -n "$url" ]; then
  # The url comes from a record: after --, with git's own upload program named, no
  # configuration and ssh without prompts (as prereg.records.ledger asks a remote).
  case "$url" in -*) refuse "the witness url $url looks like an option";; esac
  # A witness that cannot be asked is evidence not obtained: exit 3, as prereg verify's. No
  # transport that runs a program (ext::, fd::), whatever the environment allows.
  listed=$(GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 GIT_ALLOW_PROTOCOL=file:git:http:https:ssh \
    git -c core.sshCommand="ssh -o BatchMode=yes" \
    ls-remote --upload-pack=git-upload-pack -- "$url" "refs/prereg/runs/$id/start" 2>/dev/null) ||
    { echo "could not verify: the witness $url cannot be asked" >&2; exit 3; }
  held=$(cut -f1 <<<"$listed")
  [ -n "$held" ] || refuse "the witness holds no start record of $id"
  [ "$held" = "$(g hash-object --stdin < "$run/start.json")" ] || refuse "the witness holds another start of $id (a rerun)"
fi

# 9. Trusted time, when the card names a timestamp authority: the approval names it, and
#    three tokens verify under the card's root certificates: the record's (over "prereg-approval
#    ID ANCHOR"), start.json's (over the approval commit object) and attestation.tsr (over the
#    attestation); record <= the commit's own date <= start <= attestation, the commit date
#    within 300 s either side (prereg.proof.timestamp.CLOCK_SKEW: the operator's clock).
tsa=$(jq -r '.timestamp_authority.url // empty' "$card")
if [ -n "$tsa" ]; then
  named=$(jq -r '.timestamp.url // empty' "$tmp/record")
  [ "$named" = "$tsa" ] || refuse "the card registers the timestamp authority $tsa; the approval names ${named:-none}"
  [ -f "$run/attestation.tsr" ] || refuse "the attestation was not timestamped (no attestation.tsr)"
  jq -r '.timestamp_authority.roots[]' "$card" > "$tmp/roots.pem"
  jq -r .timestamp.token "$tmp/record" | base64 -d > "$tmp/t1" || refuse "the record's timestamp is not base64"
  printf 'prereg-approval %s %s\n' "$id" "$(jq -r .source_anchor "$tmp/record")" > "$tmp/d1"
  jq -r '.approval_timestamp // empty' "$run/start.json" | base64 -d > "$tmp/t2" || refuse "start.json's timestamp is not base64"
  g cat-file commit "$C" > "$tmp/d2"
  cp "$run/attestation.tsr" "$tmp/t3"; cp "$att" "$tmp/d3"
  for i in 1 2 3; do
    openssl ts -verify -data "$tmp/d$i" -in "$tmp/t$i" -CAfile "$tmp/roots.pem" >/dev/null 2>&1 ||
      refuse "timestamp $i (1 record, 2 start, 3 attestation) does not hold under the card's authority"
    stamped[i]=$(date -u -d "$(openssl ts -reply -in "$tmp/t$i" -text 2>/dev/null | sed -n 's/^Time stamp: //p')" +%s)
  done
  committed=$(g log -1 --format=%ct "$C")
  [ "$committed" -ge $((stamped[1] - 300)) ] || refuse "the approval commit is dated before its record was stamped: backdated"
  [ "$committed" -le $((stamped[2] + 300)) ] || refuse "the approval commit is dated after the run's start was stamped"
  [ "${stamped[2]}" -ge "${stamped[1]}" ] || refuse "the run's start was stamped before its approval record"
  [ "${stamped[3]}" -ge "${stamped[2]}" ] || refuse "the attestation was stamped before the run's start"
fi

# 10. git's records of the start, the attestation and its timestamp, when the repository holds them.
for pair in "start:start.json" "attestation:attestation.intoto.jsonl" "attestation-timestamp:attestation.tsr"; do
  ref=refs/prereg/runs/$id/${pair%%:*}
  if g rev-parse -q --verify "$ref" >/dev/null; then
    [ -f "$run/${pair#*:}" ] && [ "$(g cat-file blob "$ref" | sha)" = "$(sha < "$run/${pair#*:}")" ] ||
      refuse "$ref records another ${pair#*:}"
  fi
done

# 11. Each required run verifies too, its manifest as attested.
for req in $(jq -r '.predicate.buildDefinition.resolvedDependencies[] | select((.name // "") | startswith("run:")) | "\(.name | split("/") | last)=\(.digest.sha256)"' "$s1"); do
  other=$(dirname "$run")/${req%%=*}
  [ "$(sha < "$other/manifest.json" 2>/dev/null)" = "${req#*=}" ] || refuse "the required run ${req%%=*}'s manifest is not the one attested"
  bash "$0" "$repo" "$other" "$card" || { [ $? -ne 3 ] || exit 3; refuse "required run ${req%%=*}"; }
done
# 12. With --require-audit: the signed audit git records is a commit on top of a commit of
#     the history, adding exactly audits/<id>.vsa.json, signed by an auditor of its parent; the
#     summary is of this attestation, for this run, PASSED, and replayed the stage (or says
#     its kind has no replay).
if [ "${4:-}" = --require-audit ]; then
  A=$(g rev-parse -q --verify "refs/prereg/runs/$id/signed-audit^{commit}") || refuse "no signed audit of $id"
  [ "$(g rev-list --parents -n 1 "$A" | wc -w)" -eq 2 ] || refuse "the audit commit has not one parent"
  g merge-base --is-ancestor "$F" "$A^" || refuse "the audit commit does not descend from F"
  role_history "$F" "$A^"
  signed_by "$A" "$A^" auditors || refuse "the audit commit is not signed by an auditor"
  vsa=audits/$id.vsa.json
  [ "$(g diff-tree --no-commit-id --name-status -r --no-renames "$A^" "$A")" = "$(printf 'A\t%s' "$vsa")" ] ||
    refuse "the audit commit does more than add $vsa"
  g show "$A:$vsa" > "$tmp/vsa"; doc "$tmp/vsa" "$vsa"
  judge --arg attested "$(sha < "$att")" --arg id "$id" "$NEED
    need(.predicateType == \"https://slsa.dev/verification_summary/v1\"; \"not a verification summary\"),
    need(.predicate.inputAttestations[0].digest.sha256 == \$attested;
      \"the signed audit summarises another attestation\"),
    need(.predicate.resourceUri | tostring | endswith(\"/runs/\" + \$id); \"the signed audit is of another run\"),
    need(.predicate.verificationResult == \"PASSED\"; \"the auditor did not pass the run\"),
    need(.predicate.verifiedLevels | type == \"array\" and
      any(.[]; . == \"PREREG_REPLAYED\" or . == \"PREREG_KIND_HAS_NO_REPLAY\");
      \"the signed audit did not replay the stage (hashes only)\")" "$tmp/vsa"
fi
echo "verified: $id"
