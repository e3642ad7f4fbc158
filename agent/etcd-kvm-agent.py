#!/usr/bin/python3
"""etcd-kvm's agent in a member: `etcd-kvm-agent backup|defrag|metrics`, each run by its own timer.

backup: see below. defrag: the member defragments its own database when the inventory's rule holds
for it and the cluster is healthy with a leader, one member at a time under a lease-backed lock in
etcd, followers first and the leader last (it hands leadership away first); under a NOSPACE alarm
(when etcd refuses the lock's writes) members take turns in one order every member computes alike,
and the alarm is cleared once every database is back under the quota. metrics: what etcd does not
export (this member's alarms, the last backup, the last defragmentation, drift of the files the tool
manages here), in Prometheus's text format for the node exporter's textfile collector.

At each tick every member's timer fires; the member whose etcd first claims the tick in etcd (a
transaction that creates etcd-kvm/backup/ticks/<elapse> only if it does not exist, so it needs a
quorum) takes the snapshot from its own etcd, seals it in etcd-backup's format (the one the tool's
restore reads: XChaCha20-Poly1305 through libsodium, a random data key per backup sealed by the
master key), uploads it to S3 with its manifest (which binds it to the cluster, its name and its content under
a MAC keyed from the master key: the tool's tasks/backup/manifest.ts), prunes the cluster's own snapshots to
`keep` (objects whose manifest does not verify are passed over, named, and never deleted), and records the run
in etcd (etcd-kvm/backup/last-run, etcd-kvm/backup/last-success) where `status` reads it. Every other member
logs that it took none.

Only what Debian packages: python3, python3-nacl, python3-botocore (its SigV4 signer), etcdctl. Secrets are read from files, never
passed on a command line. Configuration: /etc/etcd-kvm/agent/backup.json (written by etcd-kvm; its name is older than the defrag and metrics tasks).
"""

import base64
import datetime
import grp
import hashlib
import json
import os
import pwd
import re
import subprocess
import sys
import time
import urllib.parse

# S3 and TLS (backup only) are imported where they are used: under emulation the metrics task, which
# runs every minute on every member, would spend half a second of the guest's CPU importing them.

CONFIG = "/etc/etcd-kvm/agent/backup.json"
CHUNK_BYTES = 1024 * 1024
KEY_PREFIX = "etcd-kvm/backup/"
# A tick's claim outlives any schedule's lateness; it is gone well before a day of them piles up.
CLAIM_TTL_SECONDS = 3600


class Skipped(Exception):
    """This member takes no backup at this tick, for a reason that is not a failure of the backup."""


# What etcd answers a user it does not know. A first deploy enables auth, then creates the agent's user: a tick that
# falls between the two (seen in CI, the first boot's tick at 14:13 while the deploy ran) is not a failed backup.
USER_NOT_YET = "auth: user not found"


# --- etcd, through etcdctl ---------------------------------------------------------------------


def etcdctl_env(config, command_timeout="15s", endpoint=None):
    return {
        "PATH": "/usr/bin:/bin",
        "ETCDCTL_API": "3",
        "ETCDCTL_ENDPOINTS": endpoint or config["etcd"]["endpoint"],
        "ETCDCTL_CACERT": config["etcd"]["ca_file"],
        "ETCDCTL_CERT": config["etcd"]["cert_file"],
        "ETCDCTL_KEY": config["etcd"]["key_file"],
        "ETCDCTL_COMMAND_TIMEOUT": command_timeout,
        "ETCDCTL_DIAL_TIMEOUT": "5s",
    }


def etcdctl(config, args, stdin=None, partial=False, command_timeout="15s", endpoint=None):
    """etcdctl's stdout (asked of this member's etcd, or of `endpoint`); a failure raises, unless `partial` (endpoint
    status --cluster prints the members that answered and exits 1 for the others: what they printed is still the answer)."""
    done = subprocess.run(
        [config["etcd"]["etcdctl"], *args],
        input=stdin,
        env=etcdctl_env(config, command_timeout, endpoint),
        capture_output=True,
        timeout=3600,
    )
    if done.returncode != 0 and not (partial and done.stdout.strip()):
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise RuntimeError(f"etcdctl {args[0]}: {message[-1] if message else 'exit ' + str(done.returncode)}")
    return done.stdout


TICK_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def nearest_elapse(started, elapses):
    """Of the schedule's elapses around a run's start, the one it belongs to: the nearest."""
    return min(elapses, key=lambda elapse: abs((elapse - started).total_seconds()))


def forked_at():
    """When this process was started, on this member's clock (None if /proc cannot say): its start time since boot
    against the uptime now, to a clock tick. For a timer's run that is the moment systemd started the service,
    however long Python then took to get here (a minute, in a busy emulated guest)."""
    try:
        with open("/proc/self/stat") as file:
            # After the command's name (in parentheses, which may hold spaces): field 3 on; starttime is field 22.
            start_ticks = int(file.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as file:
            uptime = float(file.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    age = max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    return datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=age)


# A process's start is known to a clock tick (10 ms) and the uptime to 10 ms: a run systemd started right at its
# elapse may be reckoned a moment before it.
START_TOLERANCE = datetime.timedelta(milliseconds=100)


def tick_of(started, schedule, fired=None):
    """(tick, period): the schedule's elapse a run belongs to, to the second, and the schedule's seconds between
    elapses (None if systemd cannot say).
    `fired`, when this process was started (forked_at): the latest elapse at or before it. A timer never starts its
    service before its elapse on its member's clock, and starts the elapse it missed while the last run went on as
    soon as that run ends, so every member names the same elapse for it however late its Python gets going, and
    whatever its clock's offset, as long as that is less than a period. (systemd 252's TRIGGER_TIMER_REALTIME_USEC
    would have said when the timer fired, but kept its first value: every run of a minutely timer in the lab was
    told 08:43.)
    Without it: the elapse nearest to `started`. If systemd cannot say, the tick is the minute."""
    when = fired or started
    period = schedule_period(schedule, when)
    if period:
        elapses = calendar_elapses(schedule, when - datetime.timedelta(seconds=period), 2)
        if fired and elapses and elapses[0] <= fired + START_TOLERANCE:
            return max(elapse for elapse in elapses if elapse <= fired + START_TOLERANCE).strftime(TICK_FORMAT), period
        if elapses:
            return nearest_elapse(started, elapses).strftime(TICK_FORMAT), period
    return when.strftime("%Y-%m-%dT%H:%M:00Z"), period


def claim(config, tick, kind="ticks"):
    """True when this member's etcd created the tick's key (it takes the backup, or the drill: `kind`); false when another had."""
    try:
        lease = json.loads(etcdctl(config, ["lease", "grant", str(CLAIM_TTL_SECONDS), "-w", "json"]))["ID"]
        key = f"{KEY_PREFIX}{kind}/{tick}"
        txn = f'create("{key}") = "0"\n\nput --lease={lease:x} {key} {config["member"]}\n\nget {key}\n\n'
        answer = json.loads(etcdctl(config, ["txn", "-w", "json"], stdin=txn.encode()))
    except (RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as error:
        raise Skipped(f"could not claim tick {tick} (this member's etcd does not answer, or has no quorum): {error}")
    return answer.get("succeeded") is True


def snapshot_revision(config, path):
    """The snapshot's revision, from etcdutl where the release has it (etcdctl's is gone in 3.6)."""
    etcdutl = os.path.join(os.path.dirname(config["etcd"]["etcdctl"]), "etcdutl")
    command = [etcdutl] if os.path.exists(etcdutl) else [config["etcd"]["etcdctl"]]
    done = subprocess.run([*command, "snapshot", "status", path, "-w", "json"], capture_output=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"snapshot status: {done.stderr.decode(errors='replace').strip()}")
    return json.loads(done.stdout)["revision"]


def hash_kv_at(config, revision, endpoint=None):
    """An etcd's HashKV at `revision` as the manifest's fields (this member's, or `endpoint`'s); raises when it cannot say."""
    answer = json.loads(etcdctl(config, ["endpoint", "hashkv", f"--rev={revision}", "-w", "json"], endpoint=endpoint))[0]["HashKV"]
    # etcdctl leaves out a field whose value is 0.
    return {"hashkv": int(answer.get("hash", 0)), "compact-revision": int(answer.get("compact_revision", 0))}


def own_hash_kv(config, revision):
    """This member's HashKV at the snapshot's revision, for the manifest: what a restore drill compares the restored
    data with. Asked right after the snapshot; a compaction in between shows as another compact revision, and the
    drill then says the hash could not be compared. None of it fails a backup: without it the manifest is version 1."""
    try:
        return hash_kv_at(config, revision)
    except (RuntimeError, ValueError, KeyError, IndexError, TypeError) as error:
        print(f"no HashKV at revision {revision} for the manifest ({error}): a version 1 manifest", file=sys.stderr)
        return {}


# A record's put is tried again while etcd does not answer: right after its defragmentation a member's etcd catches
# up on what it missed and its first requests may time out (seen in the lab under load: the put's 15 s ran out, and
# status was blind to a defragmentation that had happened).
RECORD_ATTEMPTS = 3
RECORD_RETRY_SECONDS = 3


def put_record(config, key, value):
    """Puts a record in etcd, tried again while etcd does not answer; says so when it never did (the run goes on)."""
    # A put etcd took after the client gave up is written again with the same value: harmless.
    for attempt in range(1, RECORD_ATTEMPTS + 1):
        try:
            etcdctl(config, ["put", key], stdin=value)
            return True
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            if attempt == RECORD_ATTEMPTS:
                print(f"could not record {key} in etcd ({attempt} tries): {error}", file=sys.stderr)
                return False
            time.sleep(RECORD_RETRY_SECONDS)


def record(config, name, value):
    """The backup's record `name` (last-run, last-success) in etcd: True once etcd took it."""
    return put_record(config, f"{KEY_PREFIX}{name}", json.dumps(value, sort_keys=True).encode())


# --- etcd-backup's format ----------------------------------------------------------------------


def seal_file(source, destination, master_key):
    """The snapshot sealed in 1 MiB chunks, each nonce(24) ‖ ciphertext+tag; returns the .key object
    (the data key sealed by the master key, same layout) and the sealed file's SHA-256."""
    from nacl.bindings import crypto_aead_xchacha20poly1305_ietf_encrypt as encrypt

    def sealed(key, plain):
        nonce = os.urandom(24)
        return nonce + encrypt(plain, None, nonce, key)

    data_key = os.urandom(32)
    digest = hashlib.sha256()
    with open(source, "rb") as plain, open(destination, "wb") as out:
        while chunk := plain.read(CHUNK_BYTES):
            piece = sealed(data_key, chunk)
            digest.update(piece)
            out.write(piece)
    return sealed(master_key, data_key), digest.hexdigest()


def dump_name(prefix, when):
    return f"{prefix}-{when.strftime('%Y-%m-%dT%H:%M:%SZ')}.dump"


# --- manifests: which snapshots are this cluster's own (the tool's tasks/backup/manifest.ts and trust.ts) ---

# Version 1's header is also the MAC key's label, for both versions; version 2 adds the HashKV at the revision.
MANIFEST_VERSION = "etcd-kvm backup manifest 1"
MANIFEST_VERSION_2 = "etcd-kvm backup manifest 2"
MANIFEST_FIELDS = ("cluster", "object", "revision", "dump-sha256", "key-sha256", "taken", "by")
MANIFEST_FIELDS_2 = ("hashkv", "compact-revision")
# A name may be dated this far past this member's clock; beyond it, it is planted.
FUTURE_SKEW_SECONDS = 300
# A manifest is nine short lines.
MANIFEST_CAP_BYTES = 4096


def manifest_mac(body, master_key):
    import hmac

    key = hmac.new(master_key, MANIFEST_VERSION.encode(), hashlib.sha256).digest()
    return hmac.new(key, body.encode(), hashlib.sha256).digest()


def manifest_text(fields, master_key):
    """The manifest binding a backup to this cluster, its name and its sealed objects: one field a line, then its MAC.
    Version 2 when the fields hold the HashKV (every backup now records it), version 1 otherwise."""
    labels = MANIFEST_FIELDS + (MANIFEST_FIELDS_2 if "hashkv" in fields else ())
    header = MANIFEST_VERSION_2 if "hashkv" in fields else MANIFEST_VERSION
    body = "".join(f"{line}\n" for line in [header, *(f"{field} {fields[field]}" for field in labels)])
    return body + f"mac {manifest_mac(body, master_key).hex()}\n"


def verify_manifest(text, master_key):
    """The manifest's fields when its MAC verifies with the master key and every field is there; None otherwise."""
    import hmac

    match = re.fullmatch(r"([\s\S]*\n)mac ([0-9a-f]{64})\n", text)
    if not match or not hmac.compare_digest(manifest_mac(match.group(1), master_key), bytes.fromhex(match.group(2))):
        return None
    lines = match.group(1)[:-1].split("\n")
    labels = {MANIFEST_VERSION: MANIFEST_FIELDS, MANIFEST_VERSION_2: MANIFEST_FIELDS + MANIFEST_FIELDS_2}.get(lines[0])
    if labels is None or len(lines) != len(labels) + 1:
        return None
    fields = dict(line.split(" ", 1) if " " in line else (line, "") for line in lines[1:])
    # etcd answers a compact revision of -1 for a store never compacted.
    numbers = {"revision": r"\d{1,15}", "hashkv": r"\d{1,15}", "compact-revision": r"-?\d{1,15}"}
    if not all(re.fullmatch(numbers[label], fields.get(label, "")) for label in labels if label in numbers):
        return None
    return fields


def snapshots_in(names, prefix):
    """(time, name) of the prefix's snapshots, oldest first."""
    pattern = re.compile("^" + re.escape(prefix) + r"-(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z)\.dump$")
    return sorted((datetime.datetime.fromisoformat(m.group(1)), name) for name in names if (m := pattern.match(name)))


def manifest_name(dump):
    return dump[: -len(".dump")] + ".manifest"


def judge(names, manifests, prefix, cluster, master_key, now):
    """(trusted, ignored): this cluster's snapshots as (time, name), oldest first, and the others as (name, why)."""
    trusted, ignored = [], []
    for when, name in snapshots_in(names, prefix):
        text = manifests.get(manifest_name(name))
        # In the order the tool's trust.ts judges: a planted date first, then the manifest (verified only if it gets there).
        if when > now + datetime.timedelta(seconds=FUTURE_SKEW_SECONDS):
            why = f"dated {name[len(prefix) + 1 : -len('.dump')]}, after this machine's clock ({now.strftime(TICK_FORMAT)})"
        elif text is None:
            why = "no manifest: not made by etcd-kvm with a manifest (an older version, or another tool)"
        elif (fields := verify_manifest(text, master_key)) is None:
            why = "its manifest does not verify with restore.encryption_key"
        elif fields["object"] != name:
            why = f"its manifest is {fields['object']}'s: renamed or copied"
        elif fields["cluster"] != cluster:
            why = f"taken of another cluster ({fields['cluster']}), not this state directory's ({cluster or 'none made yet'})"
        else:
            trusted.append((when, name))
            continue
        ignored.append((name, why))
    return trusted, ignored


def retention(trusted, present, keep, max_age_seconds=0, now=None, uploaded=None):
    """The objects to delete so that the `keep` newest of this cluster's snapshots stay, and none older than
    `max_age_seconds` (0: no limit) but the newest: each such .dump, then its .key and .manifest. `uploaded`,
    the one this run made, never goes; objects that are not this cluster's snapshots are never touched."""
    old = trusted[: max(len(trusted) - keep, 0)]
    if max_age_seconds and trusted:
        limit = (now or datetime.datetime.now(datetime.timezone.utc)) - datetime.timedelta(seconds=max_age_seconds)
        old = trusted[: max(len(old), len([t for t in trusted[:-1] if t[0] < limit]))]
    deleted = []
    for _, name in old:
        if name == uploaded:
            continue
        stem = name[: -len(".dump")]
        deleted += [object_name for object_name in (name, stem + ".key", stem + ".manifest") if object_name in present]
    return deleted


# --- S3: requests signed by botocore, sent with bounded answers ---------------------------------


def signed_headers(method, url, region, access_key, secret_key, payload_hash, extra=None):
    """The headers that sign a request with AWS Signature Version 4 as S3 checks it, computed by botocore's own
    signer: `url` is the request's URL exactly as it is sent (the object's name encoded once, the query encoded
    and in any order), `payload_hash` the body's SHA-256 (known here already: the signer need not read a
    snapshot twice), `extra` headers (x-amz-meta-*) are signed too. Only the signer is botocore's: its client
    would read every answer whole into memory, and an answer's size is what a hostile endpoint chooses."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    class KnownPayload(S3SigV4Auth):
        def payload(self, request):
            return payload_hash

    request = AWSRequest(method=method, url=url, headers=dict(extra or {}))
    KnownPayload(Credentials(access_key, secret_key), "s3", region).add_auth(request)
    return {name.lower(): value for name, value in request.headers.items()}


def object_path(name):
    """An object's name as a URL path: every byte but S3's unreserved ones and '/' percent-encoded, once (what S3
    signs: a name with a space, '+', ':' or a non-ASCII letter is signed as it is sent)."""
    return urllib.parse.quote(name, safe="/-_.~")


def query_string(query):
    return "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}" for k, v in sorted(query.items()))


class Bucket:
    def __init__(self, s3, access_key, secret_key):
        self.s3, self.access_key, self.secret_key = s3, access_key, secret_key
        self.base = s3["endpoint"].rstrip("/") + "/" + s3["bucket"]

    def request(
        self, method, name="", query=None, body=None, payload_hash=hashlib.sha256(b"").hexdigest(), length=0, extra=None, limit=1 << 20
    ):
        connection, answer = self.send(method, name, query, body, payload_hash, length, extra)
        # Bounded: whoever answers for S3 (or sits on a plain http:// path) cannot fill the member's memory.
        content = answer.read(limit + 1)
        connection.close()
        if len(content) > limit:
            raise RuntimeError(f"S3 {method} {name or self.s3['bucket']}: the answer is larger than {limit} bytes")
        if answer.status >= 300:
            raise RuntimeError(f"S3 {method} {name or self.s3['bucket']}: HTTP {answer.status} {content[:200]!r}")
        return content

    def send(self, method, name, query=None, body=None, payload_hash=hashlib.sha256(b"").hexdigest(), length=0, extra=None):
        """The request sent; (connection, answer) with the answer's body not read yet."""
        url = self.base + ("/" + object_path(name) if name else "") + ("?" + query_string(query) if query else "")
        parts = urllib.parse.urlsplit(url)
        headers = signed_headers(method, url, self.s3["region"] or "us-east-1", self.access_key, self.secret_key, payload_hash, extra)
        headers["content-length"] = str(length)
        import http.client
        import ssl

        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=self.s3["ca_file"] or None)
            connection = http.client.HTTPSConnection(parts.netloc, timeout=300, context=context)
        else:
            connection = http.client.HTTPConnection(parts.netloc, timeout=300)
        connection.request(method, parts.path + ("?" + parts.query if parts.query else ""), body=body, headers=headers)
        return connection, connection.getresponse()

    def put_file(self, name, path, payload_hash, metadata=None):
        extra = {f"x-amz-meta-{key}": str(value) for key, value in (metadata or {}).items()}
        with open(path, "rb") as body:
            self.request("PUT", name, body=body, payload_hash=payload_hash, length=os.path.getsize(path), extra=extra)

    def put_bytes(self, name, data):
        self.request("PUT", name, body=data, payload_hash=hashlib.sha256(data).hexdigest(), length=len(data))

    def list(self, prefix):
        import xml.etree.ElementTree as ElementTree

        names, token = [], None
        for _ in range(1000):
            query = {"list-type": "2", "prefix": prefix, **({"continuation-token": token} if token else {})}
            # A page lists at most 1000 keys: a few hundred KiB.
            root = ElementTree.fromstring(self.request("GET", query=query, limit=4 << 20))
            space = {"s3": root.tag[1 : root.tag.index("}")]} if root.tag.startswith("{") else {}
            find = (lambda node, tag: node.findall(f"s3:{tag}", space)) if space else (lambda node, tag: node.findall(tag))
            names += [key.text for content in find(root, "Contents") for key in find(content, "Key")]
            truncated = [node.text for node in find(root, "IsTruncated")]
            tokens = [node.text for node in find(root, "NextContinuationToken")]
            if truncated != ["true"] or not tokens:
                return names
            token = tokens[0]
        raise RuntimeError(f"listing {prefix}* did not end after 1000 pages")

    def get(self, name, limit):
        return self.request("GET", name, limit=limit)

    def chunks(self, name, limit, on_length=None, size=CHUNK_BYTES):
        """An object's body in pieces of `size` bytes as they arrive, never more than `limit` bytes in all;
        `on_length` is told the length the answer announces (None: none) before the first piece is read."""
        connection, answer = self.send("GET", name)
        try:
            if answer.status >= 300:
                raise RuntimeError(f"S3 GET {name}: HTTP {answer.status} {answer.read(200)!r}")
            if on_length:
                announced = answer.getheader("content-length")
                on_length(int(announced) if announced and announced.isdigit() else None)
            read = 0
            while piece := answer.read(size):
                read += len(piece)
                if read > limit:
                    raise RuntimeError(f"S3 GET {name}: larger than {limit} bytes")
                yield piece
        finally:
            connection.close()

    def delete(self, name):
        self.request("DELETE", name)


# --- the run ------------------------------------------------------------------------------------


def read_secret(path):
    with open(path) as file:
        return file.read().strip()


def calendar_elapses(schedule, base, iterations):
    """The schedule's next `iterations` elapses after `base` (or now), in UTC, as systemd computes them."""
    when = [f"--base-time={base.astimezone(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC"] if base else []
    done = subprocess.run(
        ["systemd-analyze", "calendar", f"--iterations={iterations}", *when, schedule],
        capture_output=True,
        env={"TZ": "UTC", "PATH": "/usr/bin:/bin"},
    )
    times = re.findall(r"(?:Next elapse|Iter\. #\d+): \w+ (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})", done.stdout.decode())
    elapses = [datetime.datetime.strptime(t, "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.timezone.utc) for t in times]
    return elapses if len(elapses) == iterations else []


def schedule_period(schedule, base=None):
    """Seconds between this schedule's next two elapses (after `base`, or now), as systemd computes them; None if it cannot say."""
    elapses = calendar_elapses(schedule, base, 2)
    return int((elapses[1] - elapses[0]).total_seconds()) if elapses else None


def backup(config):
    if not config.get("backup_enabled", True):
        print("scheduled backups are off (backup.enabled): none taken")
        return 0
    started = datetime.datetime.now(datetime.timezone.utc)
    tick, period = tick_of(started, config["schedule"], forked_at())
    if not claim(config, tick):
        print(f"tick {tick}: another member took this tick's backup; none taken here")
        return 0
    s3 = config["s3"]
    # Named by the tick, which every member agrees on, rather than by this member's clock.
    name = dump_name(s3["object_prefix"], datetime.datetime.strptime(tick, TICK_FORMAT))
    run = {"member": config["member"], "tick": tick, "started": started.isoformat(), "object": name}
    work = config["work_dir"]
    snapshot, sealed = os.path.join(work, "snapshot.db"), os.path.join(work, "snapshot.sealed")
    try:
        for leftover in (snapshot, sealed, snapshot + ".part"):
            if os.path.exists(leftover):
                os.remove(leftover)
        try:
            etcdctl(config, ["snapshot", "save", snapshot])
        except RuntimeError as error:
            if USER_NOT_YET in str(error):
                raise Skipped(
                    f"tick {tick}: no backup: etcd does not know this agent's user yet ({error}); a first deploy enables auth, "
                    "then creates it (if this goes on, run the deploy)"
                ) from error
            raise
        run["revision"] = snapshot_revision(config, snapshot)
        hash_kv = own_hash_kv(config, run["revision"])
        bucket = Bucket(s3, read_secret(config["secrets"]["access_key"]), read_secret(config["secrets"]["secret_key"]))
        if not config["secrets"].get("encryption_key") or not config.get("cluster_id"):
            raise RuntimeError("no encryption key or no cluster ID in the agent's configuration: a backup is sealed and bound to its cluster")
        master = bytes.fromhex(read_secret(config["secrets"]["encryption_key"]))
        sealed_key, digest = seal_file(snapshot, sealed, master)
        stem = name[: -len(".dump")]
        # The key first: whoever sees the .dump can already open it (as the tool's own backup does). The manifest
        # last: until it is there the backup is not this cluster's (a run stopped half-way leaves objects that
        # the restore and pruning pass over).
        bucket.put_bytes(stem + ".key", sealed_key)
        bucket.put_file(name, sealed, digest, {"revision": run["revision"]})
        fields = {
            "cluster": config["cluster_id"],
            "object": name,
            "revision": run["revision"],
            "dump-sha256": digest,
            "key-sha256": hashlib.sha256(sealed_key).hexdigest(),
            "taken": tick,
            "by": config["member"],
            **hash_kv,
        }
        bucket.put_bytes(stem + ".manifest", manifest_text(fields, master).encode())
        run["size"] = os.path.getsize(sealed)
        now = datetime.datetime.now(datetime.timezone.utc)
        names, _, trusted, ignored = bucket_snapshots(config, bucket, master, now)
        deleted = retention(trusted, set(names), config["keep"], config.get("max_age_seconds", 0), now, uploaded=name)
        for old in deleted:
            bucket.delete(old)
        # Said, never silently skipped: what a bucket writer planted shows in the journal and the run's record.
        run["ignored"] = [f"{object_name}: {why}" for object_name, why in ignored][:20]
        for line in run["ignored"]:
            print(f"tick {tick}: ignored {line}")
        run.update(outcome="ok", pruned=deleted)
    except Skipped:
        raise
    except Exception as error:  # noqa: BLE001 - every failure is recorded and logged with its reason
        run.update(outcome="failed", error=str(error)[:500])
    finally:
        for leftover in (snapshot, sealed):
            if os.path.exists(leftover):
                os.remove(leftover)
    run["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    run["period_seconds"] = period
    if record(config, "last-run", run) and run["outcome"] == "ok":
        record(config, "last-success", run)
    if run["outcome"] != "ok":
        print(f"tick {tick}: backup failed: {run['error']}", file=sys.stderr)
        return 1
    print(f"tick {tick}: backed up revision {run['revision']} as {name} ({run['size']} bytes); pruned {len(run['pruned'])} object(s)")
    return 0


# --- restore drills: the newest backup proven to restore (the tool's drill/plan.ts and drill/run.ts) ---

# A sealed chunk: its nonce, CHUNK_BYTES of snapshot (the last one fewer), its tag.
SEALED_CHUNK_BYTES = 24 + CHUNK_BYTES + 16


def open_sealed(key, sealed):
    """One sealed piece (nonce ‖ ciphertext+tag) opened with `key`; raises when it does not authenticate."""
    from nacl.bindings import crypto_aead_xchacha20poly1305_ietf_decrypt as decrypt

    return decrypt(sealed[24:], None, sealed[:24], key)


def opened_chunks(pieces, data_key):
    """The snapshot's bytes from the sealed object's, as they arrive (etcd-backup's format, as seal_file writes it)."""
    buffer = b""
    for piece in pieces:
        buffer += piece
        while len(buffer) >= SEALED_CHUNK_BYTES:
            yield open_sealed(data_key, buffer[:SEALED_CHUNK_BYTES])
            buffer = buffer[SEALED_CHUNK_BYTES:]
    if buffer:
        yield open_sealed(data_key, buffer)


def drill_member(view, order):
    """(member, None), the member that runs this tick's drill, or (None, why not): the first voting follower in the
    inventory's order, and only while the cluster is healthy (every member answers, no learner, no alarm, one leader).
    The tool's drill/plan.ts drillMember; test/unit/drill-agent.test.ts holds the two to one table."""
    by_name = {member["name"]: member for member in view["members"]}
    unhealthy = []
    for name in order:
        member = by_name.get(name)
        if member is None or member["id"] not in view["statuses"]:
            unhealthy.append(f"{name} does not answer")
        elif member["learner"]:
            unhealthy.append(f"{name} is a learner")
    unhealthy += [f"the cluster has a {alarm['alarm']} alarm" for alarm in view["alarms"]]
    leaders = {status["leader"] for status in view["statuses"].values()}
    if len(leaders) != 1 or 0 in leaders:
        unhealthy.append("the members do not name one leader")
    if unhealthy:
        return None, f"a restore drill runs only on a healthy cluster, and this one is not: {'; '.join(unhealthy)}"
    leader = next(iter(leaders))
    followers = [name for name in order if by_name[name]["id"] != leader]
    return (followers[0], None) if followers else (None, "the cluster has no follower to run a drill on")


def compaction(revision):
    return "never compacted" if revision < 0 else f"compacted at revision {revision}"


def judge_drill(manifest, restored):
    """(outcome, findings): what the restored copy proves against its manifest (verify_manifest's fields): a revision
    at least the recorded one, and (version 2) the HashKV recorded at backup time. The tool's drill/plan.ts
    judgeDrill, word for word; test/unit/drill-agent.test.ts holds the two to one table."""
    findings = [f"restored: revision {restored['revision']}, {restored['keys']} keys"]
    ok = True
    revision = int(manifest["revision"])
    if restored["revision"] < revision:
        ok = False
        findings.append(f"its revision {restored['revision']} is below the manifest's {revision}: not the snapshot the manifest describes")
    found = restored.get("hash_kv")
    if "hashkv" not in manifest:
        findings.append("HashKV not compared: the manifest (version 1, made before drills) records none")
    elif found is None or "error" in found:
        ok = False
        why = found["error"] if found else "not asked"
        findings.append(f"HashKV at revision {revision} could not be read from the restored copy: {why}")
    elif found["compact-revision"] != int(manifest["compact-revision"]):
        findings.append(
            f"HashKV not compared: the member was {compaction(int(manifest['compact-revision']))} when it was hashed, "
            f"the snapshot {compaction(found['compact-revision'])} (a compaction between the two)"
        )
    elif found["hashkv"] != int(manifest["hashkv"]):
        ok = False
        findings.append(
            f"HashKV at revision {revision} is {found['hashkv']}, but {manifest['hashkv']} was recorded at backup time: "
            "the restored data is not what the cluster held"
        )
    else:
        findings.append(f"HashKV at revision {revision} is {found['hashkv']}, as recorded at backup time")
    return ("ok" if ok else "failed"), findings


def bucket_snapshots(config, bucket, master, now):
    """(names, manifests, trusted, ignored): the prefix's objects, the manifests of its snapshots, and judge's
    verdict on them, as pruning and the drills read the bucket."""
    prefix = config["s3"]["object_prefix"]
    names = bucket.list(prefix + "-")
    manifests = {
        manifest_name(dump): bucket.get(manifest_name(dump), MANIFEST_CAP_BYTES).decode(errors="replace")
        for _, dump in snapshots_in(names, prefix)
        if manifest_name(dump) in names
    }
    trusted, ignored = judge(names, manifests, prefix, config["cluster_id"], master, now)
    return names, manifests, trusted, ignored


def newest_trusted(config, bucket, master):
    """(name, manifest fields) of this cluster's newest backup (judge: only what verifies), or None."""
    _, manifests, trusted, _ = bucket_snapshots(config, bucket, master, datetime.datetime.now(datetime.timezone.utc))
    if not trusted:
        return None
    name = trusted[-1][1]
    return name, verify_manifest(manifests[manifest_name(name)], master)


class NotAnswering(RuntimeError):
    """The drill's etcd did not come up on the restored copy."""


class NotIntact(Exception):
    """The backup did not download as its manifest describes it: nothing was restored."""


def fetch_snapshot(config, bucket, master, name, fields, destination, on_length):
    """The backup `name` downloaded, checked against its manifest (the SHA-256 of its sealed objects) and opened into
    `destination`, a chunk at a time: never more of it in memory than a chunk, never more on disk than the snapshot.
    `on_length` is told the sealed object's length before any of it is written."""
    stem = name[: -len(".dump")]
    sealed_key = bucket.get(stem + ".key", 4096)
    if hashlib.sha256(sealed_key).hexdigest() != fields["key-sha256"]:
        raise NotIntact(f"{stem}.key is not the one its manifest records")
    try:
        data_key = open_sealed(master, sealed_key)
    except Exception as error:  # noqa: BLE001 - PyNaCl's CryptoError, or a key too short to hold a nonce
        raise NotIntact(f"{stem}.key does not open with restore.encryption_key ({error})") from error
    digest = hashlib.sha256()
    # A snapshot is at most the space quota; sealed, 40 bytes a chunk more: twice the quota bounds a hostile answer.
    limit = config["defrag"]["quota_bytes"] * 2 + 64 * CHUNK_BYTES

    def counted():
        for piece in bucket.chunks(name, limit, on_length):
            digest.update(piece)
            yield piece

    try:
        with open(destination, "wb") as out:
            for chunk in opened_chunks(counted(), data_key):
                out.write(chunk)
    except (RuntimeError, Skipped):
        raise
    except Exception as error:  # noqa: BLE001 - a chunk that does not authenticate
        raise NotIntact(f"{name} does not open with its key: {error or type(error).__name__}") from error
    if digest.hexdigest() != fields["dump-sha256"]:
        raise NotIntact(f"{name} is not the object its manifest records (SHA-256 {digest.hexdigest()})")


def read_restored(config, process, revision):
    """What the throwaway etcd serves: its revision and keys, and its HashKV at the manifest's `revision`."""
    drill = config["verify"]
    endpoint = drill["client_url"]
    deadline = time.monotonic() + drill["answer_window_seconds"]
    while True:
        if process.poll() is not None:
            raise NotAnswering(f"the drill's etcd exited ({process.returncode}) before it answered")
        try:
            status = json.loads(etcdctl(config, ["endpoint", "status", "-w", "json"], endpoint=endpoint, command_timeout="5s"))[0]["Status"]
            if status.get("leader") and status["leader"] == status["header"]["member_id"]:
                break
        except (RuntimeError, ValueError, KeyError, IndexError, subprocess.TimeoutExpired):
            pass
        if time.monotonic() > deadline:
            raise NotAnswering(f"the drill's etcd did not answer within {drill['answer_window_seconds']} s")
        time.sleep(1)
    # A range's count is every key in it, whatever its limit (etcdctl 3.4 has no --count-only).
    counted = json.loads(etcdctl(config, ["get", "", "--prefix", "--limit=1", "-w", "json"], endpoint=endpoint, command_timeout="60s"))
    restored = {"revision": int(status["header"]["revision"]), "keys": int(counted.get("count", 0))}
    try:
        restored["hash_kv"] = hash_kv_at(config, revision, endpoint)
    except (RuntimeError, ValueError, KeyError, IndexError, subprocess.TimeoutExpired) as error:
        restored["hash_kv"] = {"error": str(error)[:300]}
    return restored


def room_verdict(config, snapshot_bytes):
    """Why the data disk cannot take a drill of a snapshot this large, or None (the tool's drill/plan.ts roomVerdict:
    the same need, drillNeedsBytes, handed over as `spare_bytes`)."""
    drill = config["verify"]
    stats = os.statvfs(drill["scratch"])
    available = stats.f_bavail * stats.f_frsize
    need = 2 * snapshot_bytes + drill["spare_bytes"]
    if available >= need:
        return None
    mib = lambda count: f"{-(-count // (1024 * 1024))} MiB"  # noqa: E731
    return (
        f"{config['member']}'s data disk has {mib(available)} free, and a drill of this {mib(snapshot_bytes)} snapshot needs "
        f"{mib(need)}: nothing was restored (grow the data disk)"
    )


def clear_scratch(scratch):
    """The scratch directory there and empty (a killed run's leftovers gone too), this user's alone."""
    import shutil

    os.makedirs(scratch, mode=0o700, exist_ok=True)
    for entry in os.listdir(scratch):
        path = os.path.join(scratch, entry)
        shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)


def drill_once(config, bucket, master, name, fields):
    """The drill of one backup in this member: (restored facts, None) or (None, why it did not restore)."""
    drill = config["verify"]
    scratch = drill["scratch"]
    snapshot = os.path.join(scratch, "snapshot.db")

    def room_for(sealed_bytes):
        # The sealed object is the snapshot and 40 bytes a chunk; an answer that announces no length is checked as empty.
        no_room = room_verdict(config, sealed_bytes or 0)
        if no_room:
            raise Skipped(no_room)

    fetch_snapshot(config, bucket, master, name, fields, snapshot, room_for)
    done = subprocess.run(drill["restore"], capture_output=True, timeout=1800)
    os.remove(snapshot)
    if done.returncode != 0:
        return None, f"not restored on {config['member']}: {done.stderr.decode(errors='replace').strip()[-1500:]}"
    log = open(os.path.join(scratch, "etcd.log"), "wb")
    process = subprocess.Popen(drill["etcd"], stdout=log, stderr=subprocess.STDOUT)
    try:
        return read_restored(config, process, int(fields["revision"])), None
    except NotAnswering as error:
        log.flush()
        with open(os.path.join(scratch, "etcd.log"), "rb") as file:
            tail = b"\n".join(file.read().splitlines()[-15:]).decode(errors="replace")
        return None, f"not restored on {config['member']}: {error}; its last log lines:\n{tail}"[:1500]
    except (RuntimeError, ValueError, KeyError, IndexError, subprocess.TimeoutExpired) as error:
        return None, f"not read on {config['member']}: {error}"[:1500]
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def verify(config):
    drill = config["verify"]
    if not (config["backup_enabled"] and drill["enabled"]):
        print("scheduled restore drills are off (backup.verify.enabled): none run")
        return 0
    started = datetime.datetime.now(datetime.timezone.utc)
    tick, period = tick_of(started, drill["schedule"], forked_at())
    member, refused = drill_member(cluster_view(config), drill["members"])
    if refused:
        raise Skipped(f"tick {tick}: no drill: {refused}")
    if member != config["member"]:
        print(f"tick {tick}: the drill is {member}'s (the first voting follower); none here")
        return 0
    if not claim(config, tick, "drill-ticks"):
        print(f"tick {tick}: another member took this tick's drill; none here")
        return 0
    s3 = config["s3"]
    bucket = Bucket(s3, read_secret(config["secrets"]["access_key"]), read_secret(config["secrets"]["secret_key"]))
    master = bytes.fromhex(read_secret(config["secrets"]["encryption_key"]))
    try:
        newest = newest_trusted(config, bucket, master)
    except (OSError, RuntimeError, ValueError) as error:
        # Not the backup's failure: the drill could not look. Said, and left to the alert on unverified backups.
        print(f"tick {tick}: no drill: the bucket could not be listed: {error}", file=sys.stderr)
        return 1
    if newest is None:
        raise Skipped(f"tick {tick}: no drill: the bucket holds no backup of this cluster yet")
    name, fields = newest
    result = {"object": name, "member": config["member"], "by": "its agent on schedule", "period_seconds": period}
    try:
        clear_scratch(drill["scratch"])
        restored, failed = drill_once(config, bucket, master, name, fields)
    except NotIntact as error:
        restored, failed = None, f"not restored: it did not download intact: {error}"
    finally:
        clear_scratch(drill["scratch"])
    if restored is None:
        outcome, findings = "failed", [failed]
    else:
        outcome, findings = judge_drill(fields, restored)
        result.update(revision=restored["revision"], keys=restored["keys"])
    result.update(outcome=outcome, findings=findings, finished=datetime.datetime.now(datetime.timezone.utc).isoformat())
    if record(config, "last-drill", result) and outcome == "ok":
        record(config, "last-verified", result)
    print(f"tick {tick}: drill of {name}: {outcome}: {'; '.join(findings)}", file=sys.stdout if outcome == "ok" else sys.stderr)
    return 0 if outcome == "ok" else 1


# --- defragmentation by rule --------------------------------------------------------------------

ALARMS = ("NOSPACE", "CORRUPT")
# How a member's status lists each of the cluster's active alarms among its errors.
ALARM_ERROR = re.compile(r"memberID:(\d+) alarm:([A-Z]+)")
DEFRAG_PREFIX = "etcd-kvm/defrag/"
LOCK_TTL_SECONDS = 60
# How long a member that qualifies waits for another's defragmentation to end, within one tick.
LOCK_WAIT_SECONDS = 45


def rule_holds(size, in_use, rule, quota):
    """The inventory's rule (maintenance.defrag.rule) for one database: fragmented, or near the quota with something to free."""
    free = max(size - in_use, 0)
    fragmented = free >= rule["free_bytes"] and size > 0 and free / size >= rule["free_fraction"]
    near_quota = rule["quota_fraction"] > 0 and size >= quota * rule["quota_fraction"] and free > 0
    return fragmented or near_quota


def own_status(config):
    """This member's status, as its own etcd says (ETCDCTL_ENDPOINTS is its own endpoint)."""
    return json.loads(etcdctl(config, ["endpoint", "status", "-w", "json"]))[0]


def alarms_in(statuses):
    """The cluster's active alarms, as the members' statuses list them among their errors. Each member
    lists all of them from its own applied state, so they are known without a leader; `alarm list`
    would go through raft: an entry in every member's log at each ask, and no answer without quorum."""
    errors = [error for entry in statuses for error in entry["Status"].get("errors") or []]
    seen = {(int(match.group(1)), match.group(2)) for match in map(ALARM_ERROR.search, errors) if match}
    return [{"member": member, "alarm": alarm} for member, alarm in sorted(seen)]


def status_facts(entry):
    """What a decision reads of one member's `endpoint status` entry."""
    return {
        "size": entry["Status"].get("dbSize", 0),
        "in_use": entry["Status"].get("dbSizeInUse", entry["Status"].get("dbSize", 0)),
        "leader": entry["Status"].get("leader", 0),
    }


def solo_view(status):
    """This member alone, from its own status: its facts and the cluster's alarms (each member lists all of them)."""
    me = status["Status"]["header"]["member_id"]
    return {"me": me, "statuses": {me: status_facts(status)}, "alarms": alarms_in([status])}


def cluster_view(config, me=None):
    """The facts a decision reads: the member list, the status of every member that answered, the alarms. `me`: this
    member's ID when the caller has it (the defrag tick has just read its own status)."""
    listed = json.loads(etcdctl(config, ["member", "list", "-w", "json"]))["members"]
    answered = json.loads(etcdctl(config, ["endpoint", "status", "--cluster", "-w", "json"], partial=True) or b"[]")
    # This member answered the member list, so it is among those that answered: its entry names it.
    mine = [entry["Status"]["header"]["member_id"] for entry in answered if entry.get("Endpoint") == config["etcd"]["endpoint"]]
    view = {
        "me": mine[0] if mine else me if me is not None else own_status(config)["Status"]["header"]["member_id"],
        "members": [{"id": m["ID"], "name": m.get("name", ""), "learner": bool(m.get("isLearner"))} for m in listed],
        "statuses": {entry["Status"]["header"]["member_id"]: status_facts(entry) for entry in answered},
        "alarms": alarms_in(answered),
    }
    # A member silent while it defragments holds the lock: read who holds it only then (a healthy tick asks nothing more).
    if any(m["id"] not in view["statuses"] for m in view["members"]):
        try:  # this member's own view (serializable): with a member silent, quorum may be what is missing
            held = etcdctl(config, ["get", "--consistency=s", "--print-value-only", config["defrag"]["lock_key"]])
            view["lock_holder"] = held.decode(errors="replace").strip() or None
        except (RuntimeError, subprocess.TimeoutExpired):
            view["lock_holder"] = None
    return view


def defrag_turns(view, rule, quota):
    """The members whose database the rule holds for, in the order they go: followers by name, the leader last."""
    leaders = {status["leader"] for status in view["statuses"].values()}
    names = {m["id"]: m["name"] for m in view["members"]}
    due = [mid for mid, status in view["statuses"].items() if rule_holds(status["size"], status["in_use"], rule, quota)]
    return sorted(due, key=lambda mid: (mid in leaders, names.get(mid, ""), mid))


def decide(view, rule, quota, disarm_below):
    """What this member does at this tick, and why: ("defrag", reason), ("defrag-turn", …) under NOSPACE
    (no lock), ("disarm", …), ("await-lock", …) when the only member not answering is the one defragmenting
    under the lock (look again once it lets go), or ("skip", reason). Pure: the tests hold it against tables."""
    me, statuses = view["me"], view["statuses"]
    names = {m["id"]: m["name"] or f"{m['id']:x}" for m in view["members"]}
    kinds = {a["alarm"] for a in view["alarms"]}
    if kinds - {"NOSPACE"}:
        return ("skip", f"alarm {', '.join(sorted(kinds - {'NOSPACE'}))} active: no maintenance until an operator has looked")
    silent = [names[m["id"]] for m in view["members"] if m["id"] not in statuses]
    if me not in statuses:
        return ("skip", "this member's etcd does not answer")
    turns = defrag_turns(view, rule, quota)
    if "NOSPACE" in kinds:
        if silent:
            # A member defragmenting answers nothing: turns decided without it could name a second member (two of
            # three blocked at once is a quorum lost for as long).
            return ("skip", f"NOSPACE alarm, and {', '.join(sorted(silent))} does not answer (it may be defragmenting): no turn until every member answers")
        if all(status["size"] < quota * disarm_below for status in statuses.values()):
            return ("disarm", f"every database is under {int(disarm_below * 100)} % of the quota")
        if turns and turns[0] == me:
            return ("defrag-turn", "NOSPACE alarm: this member's turn (etcd refuses the lock's writes under the alarm)")
        if not turns:
            return ("skip", "NOSPACE alarm, and no database has space to free: delete keys and compact first")
        return ("skip", f"NOSPACE alarm: {names.get(turns[0], turns[0])} goes first")
    if silent and silent == [view.get("lock_holder")]:
        # Defragmenting, a member answers nothing: once its lock is free the cluster may be healthy again.
        return ("await-lock", f"{silent[0]} is defragmenting (it holds the lock): this member waits for it and looks again")
    if silent:
        return ("skip", f"the cluster is not healthy: {', '.join(sorted(silent))} does not answer")
    leaders = {status["leader"] for status in statuses.values()}
    if len(leaders) != 1 or 0 in leaders:
        return ("skip", "the cluster is not healthy: no single leader")
    mine = statuses[me]
    if me not in turns:
        return ("skip", f"the rule does not hold here (size {mine['size']}, in use {mine['in_use']})")
    waiting = [names.get(mid, mid) for mid in turns if mid != me]
    if me in leaders and waiting:
        return ("skip", f"the leader goes last: {', '.join(waiting)} first")
    return ("defrag", f"the rule holds (size {mine['size']}, in use {mine['in_use']})")


def run_lock_holder(answer):
    """The run lock's holder, as the failed lock transaction read it (the tool's JSON record); None when it is free."""
    for response in answer.get("responses", []):
        for kv in response.get("Response", {}).get("ResponseRange", {}).get("kvs", []):
            return base64.b64decode(kv.get("value", "")).decode(errors="replace")
    return None


def take_lock(config):
    """(lock, why not): a lease-backed lock in etcd (one key created only if absent), kept alive while this member
    holds it. Taken only while no run of the tool holds the cluster's run lock (both in one transaction: a deploy
    takes its lock only while no defragmentation holds this one, so a roll and a defragmentation never overlap);
    while one does, none and who holds it at once (runs take minutes). None too when another member still held
    the defragmentation's lock after LOCK_WAIT_SECONDS."""
    lock_key, run_lock = config["defrag"]["lock_key"], config["run_lock_key"]
    lease = json.loads(etcdctl(config, ["lease", "grant", str(LOCK_TTL_SECONDS), "-w", "json"]))["ID"]
    txn = f'create("{lock_key}") = "0"\ncreate("{run_lock}") = "0"\n\nput --lease={lease:x} {lock_key} {config["member"]}\n\nget {run_lock}\n\n'
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        answer = json.loads(etcdctl(config, ["txn", "-w", "json"], stdin=txn.encode()))
        if answer.get("succeeded"):
            break
        holder = run_lock_holder(answer)
        if holder is not None or time.monotonic() > deadline:
            etcdctl(config, ["lease", "revoke", f"{lease:x}"])
            if holder is not None:
                return None, f"a run of etcd-kvm holds the cluster's run lock ({run_lock}: {holder[:300]})"
            return None, f"another member still held {lock_key} after {LOCK_WAIT_SECONDS} s"
        time.sleep(2)
    keeper = subprocess.Popen(
        [config["etcd"]["etcdctl"], "lease", "keep-alive", f"{lease:x}"], env=etcdctl_env(config), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return (lease, keeper), None


def release_lock(config, lock):
    lease, keeper = lock
    keeper.terminate()
    keeper.wait(timeout=10)
    etcdctl(config, ["lease", "revoke", f"{lease:x}"])


def hand_leadership_away(config, view):
    """Moves leadership to the first answering voting member by name; returns its name."""
    names = {m["id"]: m["name"] for m in view["members"]}
    voters = sorted(
        (m for m in view["members"] if not m["learner"] and m["id"] != view["me"] and m["id"] in view["statuses"]),
        key=lambda m: (m["name"], m["id"]),
    )
    if not voters:
        if sum(not m["learner"] for m in view["members"]) == 1:
            return None  # a cluster of one: nobody to hand leadership to
        raise RuntimeError("no other voting member answers to take leadership")
    etcdctl(config, ["move-leader", f"{voters[0]['id']:x}"])
    return names[voters[0]["id"]] or f"{voters[0]['id']:x}"


def defragment_self(config, view, locked):
    """Defragments this member's database; the record of it in etcd (when etcd takes writes) and in the state directory."""
    before = view["statuses"][view["me"]]
    moved = hand_leadership_away(config, view) if before["leader"] == view["me"] else None
    started = time.monotonic()
    etcdctl(config, ["defrag"], command_timeout="30m")
    own = json.loads(etcdctl(config, ["endpoint", "status", "-w", "json"]))[0]["Status"]
    after = {"size": own.get("dbSize"), "in_use": own.get("dbSizeInUse")}
    resultof = {
        "member": config["member"],
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "seconds": round(time.monotonic() - started, 3),
        "before": {"size": before["size"], "in_use": before["in_use"]},
        "after": {"size": after.get("size"), "in_use": after.get("in_use")},
        "locked": locked,
        **({"leadership_moved_to": moved} if moved else {}),
    }
    with open(os.path.join(config["work_dir"], "last-defrag.json"), "w") as file:
        json.dump(resultof, file)
    put_record(config, f"{DEFRAG_PREFIX}last/{config['member']}", json.dumps(resultof, sort_keys=True).encode())
    moved_note = f"; leadership handed to {moved} first" if moved else ""
    print(f"defragmented: {before['size']} -> {after.get('size')} bytes (in use {after.get('in_use')}) in {resultof['seconds']} s{moved_note}")


def defrag(config):
    settings = config["defrag"]
    if not settings["enabled"]:
        print("scheduled defragmentation is off (maintenance.defrag.enabled): nothing done")
        return 0
    rule, quota, below = settings["rule"], settings["quota_bytes"], settings["disarm_below_fraction"]
    try:
        # Most ticks end here: no alarm, and the rule does not hold for this member, whatever the others say. Its
        # own status is one etcdctl run; the cluster's view is two more, each a TLS handshake with every member
        # (1.3 s of a guest's time under emulation, twice a minute on every member in the lab).
        own = solo_view(own_status(config))
        mine = own["statuses"][own["me"]]
        if not own["alarms"] and not rule_holds(mine["size"], mine["in_use"], rule, quota):
            print(f"nothing done: the rule does not hold here (size {mine['size']}, in use {mine['in_use']})")
            return write_metrics(config, own)
        view = cluster_view(config, own["me"])
    except (RuntimeError, ValueError, KeyError, IndexError, subprocess.TimeoutExpired) as error:
        print(f"nothing done: this member's etcd does not answer ({error})")
        return write_metrics(config)
    action, why = decide(view, rule, quota, below)
    if action == "skip":
        print(f"nothing done: {why}")
        return write_metrics(config, view)
    if action == "disarm":
        etcdctl(config, ["alarm", "disarm"])
        print(f"NOSPACE alarm cleared: {why}")
    elif action == "defrag-turn":
        print(why)
        defragment_self(config, view, locked=False)
        if decide(cluster_view(config), rule, quota, below)[0] == "disarm":
            etcdctl(config, ["alarm", "disarm"])
            print("NOSPACE alarm cleared: every database is under the quota again")
    else:  # "defrag", or "await-lock": either way the decision that counts is the one made under the lock
        if action == "await-lock":
            print(why)
        lock, why_not = take_lock(config)
        if lock is None:
            print(f"nothing done: {why_not}; the next tick looks again")
            return write_metrics(config)
        try:
            # Looked at again under the lock: the member before may have changed who qualifies, or the health.
            view = cluster_view(config)
            action, why = decide(view, rule, quota, below)
            if action == "defrag":
                print(why)
                defragment_self(config, view, locked=True)
            else:
                print(f"nothing done, under the lock: {why}")
                return write_metrics(config, view)
        finally:
            release_lock(config, lock)
    return write_metrics(config)


# --- metrics for the node exporter's textfile collector -------------------------------------------


def managed_file_drift(manifest_path):
    """(files, drifted): the manifest the last converged run wrote, against each file's mode, owner and digest."""
    try:
        with open(manifest_path) as file:
            entries = json.load(file)
    except (OSError, ValueError):
        return None
    drifted = 0
    for entry in entries:
        try:
            info = os.stat(entry["path"])
        except PermissionError:
            continue  # in a directory the etcd user cannot enter: not checked here (the deploy still is)
        except OSError:
            drifted += 1
            continue
        owner = f"{pwd.getpwuid(info.st_uid).pw_name}:{grp.getgrgid(info.st_gid).gr_name}"
        if oct(info.st_mode & 0o7777)[2:].rjust(4, "0") != entry["mode"].rjust(4, "0") or owner != entry["owner"]:
            drifted += 1
            continue
        if "sha256" in entry:
            try:
                with open(entry["path"], "rb") as file:
                    if hashlib.file_digest(file, "sha256").hexdigest() != entry["sha256"]:
                        drifted += 1
            except PermissionError:
                pass
    return len(entries), drifted


def metric_lines(name, help_text, samples):
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    for labels, value in samples:
        lines.append(f"{name}{labels} {value}")
    return lines


def raised_alarms(config, view=None):
    """The alarms raised on this member: from a view still current (the defrag tick's), else asked."""
    view = view if view is not None else solo_view(own_status(config))
    return {a["alarm"] for a in view["alarms"] if a["member"] == view["me"]}


def write_metrics(config, view=None):
    """This member's series, written to the staging file its unit moves into the textfile directory.
    `view`: a cluster view nothing has changed since (the defrag tick's), so its alarms are not asked again."""
    lines = metric_lines("etcd_kvm_agent_run_timestamp_seconds", "When the agent last wrote these series.", [("", int(time.time()))])
    try:
        raised = raised_alarms(config, view)
        lines += metric_lines(
            "etcd_kvm_alarm_active",
            "1 while this member has the alarm raised (etcd exports no alarm metric).",
            [(f'{{alarm="{kind}"}}', int(kind in raised)) for kind in ALARMS],
        )
        if config.get("backup_enabled"):
            lines += backup_lines(config)
    except (RuntimeError, ValueError, KeyError, IndexError, subprocess.TimeoutExpired) as error:
        print(f"etcd did not answer the metrics' questions: {error}", file=sys.stderr)
    try:
        with open(os.path.join(config["work_dir"], "last-defrag.json")) as file:
            last_defrag = datetime.datetime.fromisoformat(json.load(file)["time"]).timestamp()
    except (OSError, ValueError, KeyError):
        last_defrag = 0
    lines += metric_lines("etcd_kvm_defrag_last_timestamp_seconds", "When this member was last defragmented by its agent (0: never).", [("", int(last_defrag))])
    drift = managed_file_drift(config["metrics"]["manifest"])
    if drift is not None:
        lines += metric_lines("etcd_kvm_managed_files", "Files etcd-kvm manages in this member.", [("", drift[0])])
        lines += metric_lines(
            "etcd_kvm_managed_files_drifted", "Managed files whose mode, owner or content differ from the last converged run's.", [("", drift[1])]
        )
    staging = config["metrics"]["staging"]
    with open(staging + ".tmp", "w") as file:
        file.write("\n".join(lines) + "\n")
    os.chmod(staging + ".tmp", 0o644)
    os.replace(staging + ".tmp", staging)
    return 0


def backup_lines(config):
    answer = json.loads(etcdctl(config, ["get", f"{KEY_PREFIX}last-", "--prefix", "-w", "json"]))
    records = {}
    for kv in answer.get("kvs", []):
        key = base64.b64decode(kv["key"]).decode()
        try:
            records[key[len(KEY_PREFIX) :]] = json.loads(base64.b64decode(kv["value"]))
        except ValueError:
            continue
    success, last = records.get("last-success", {}), records.get("last-run", {})
    when = datetime.datetime.fromisoformat(success["finished"]).timestamp() if success.get("finished") else 0
    period = last.get("period_seconds") or success.get("period_seconds") or schedule_period(config["schedule"]) or 0
    # The restore drills' records (etcd-kvm backup --verify, the tool's drill/run.ts), in the same answer.
    last_drill, verified = records.get("last-drill", {}), records.get("last-verified", {})
    verified_at = datetime.datetime.fromisoformat(verified["finished"]).timestamp() if verified.get("finished") else 0
    return [
        *backup_metric_lines(when, period, last, last_drill, verified_at),
        *verify_schedule_lines(config["verify"], last_drill),
    ]


def verify_schedule_lines(drill, last_drill):
    """The scheduled drills' period (0: off) and since when they are scheduled (their timer's file): what the alert
    on a backup left unverified counts from until a drill verifies one."""
    period, since = 0, 0
    if drill["enabled"]:
        period = last_drill.get("period_seconds") or schedule_period(drill["schedule"]) or 0
        try:
            since = int(os.stat(drill["timer"]).st_mtime)
        except OSError:
            since = 0
    return [
        *metric_lines("etcd_kvm_backup_verify_period_seconds", "The restore drills' schedule period (0: no scheduled drills).", [("", int(period))]),
        *metric_lines(
            "etcd_kvm_backup_verify_scheduled_since_timestamp_seconds",
            "Since when restore drills are scheduled (their timer's unit file; 0: not scheduled).",
            [("", since)],
        ),
    ]


def backup_metric_lines(when, period, last, last_drill, verified_at):
    return [
        *metric_lines("etcd_kvm_backup_last_success_timestamp_seconds", "When the cluster's last backup succeeded (0: none yet).", [("", int(when))]),
        *metric_lines("etcd_kvm_backup_period_seconds", "The backup schedule's period.", [("", int(period))]),
        *metric_lines("etcd_kvm_backup_last_run_failed", "1 when the cluster's last backup run failed.", [("", int(last.get("outcome") == "failed"))]),
        *metric_lines(
            "etcd_kvm_backup_last_drill_failed", "1 when the cluster's last restore drill failed.", [("", int(last_drill.get("outcome") == "failed"))]
        ),
        *metric_lines(
            "etcd_kvm_backup_last_verified_timestamp_seconds",
            "When a restore drill last verified a backup of the cluster (0: none yet).",
            [("", int(verified_at))],
        ),
    ]


def defrag_task(config):
    try:
        return defrag(config)
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"defragmentation failed: {error}", file=sys.stderr)
        write_metrics(config)
        return 1


COMMANDS = {"backup": backup, "defrag": defrag_task, "verify": verify, "metrics": write_metrics}


def main(argv):
    # Each line reaches the journal as it is said, not when the run ends (stdout is a pipe there).
    sys.stdout.reconfigure(line_buffering=True)
    if len(argv) != 2 or argv[1] not in COMMANDS:
        print(f"usage: etcd-kvm-agent {'|'.join(COMMANDS)}", file=sys.stderr)
        return 2
    with open(CONFIG) as file:
        config = json.load(file)
    try:
        return COMMANDS[argv[1]](config)
    except Skipped as skipped:
        print(str(skipped), file=sys.stderr)
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
