#!/usr/bin/python3
"""etcd-kvm's agent in a member: `etcd-kvm-agent backup`, run by the etcd-kvm-backup timer.

At each tick every member's timer fires; the member whose etcd first claims the tick in etcd (a
transaction that creates etcd-kvm/backup/ticks/<minute> only if it does not exist, so it needs a
quorum) takes the snapshot from its own etcd, seals it in etcd-backup's format (the one the tool's
restore reads: XChaCha20-Poly1305 through libsodium, a random data key per backup sealed by the
master key), uploads it to S3 (its revision in the object's metadata, x-amz-meta-revision), prunes to `keep`, and records the run in etcd (etcd-kvm/backup/last-run,
etcd-kvm/backup/last-success) where `status` reads it. Every other member logs that it took none.

Only what Debian packages: python3, python3-nacl, etcdctl. Secrets are read from files, never
passed on a command line. Configuration: /etc/etcd-kvm/agent/backup.json (written by etcd-kvm).
"""

import datetime
import hashlib
import hmac
import http.client
import json
import os
import re
import ssl
import subprocess
import sys
import urllib.parse
import xml.etree.ElementTree as ElementTree

CONFIG = "/etc/etcd-kvm/agent/backup.json"
CHUNK_BYTES = 1024 * 1024
KEY_PREFIX = "etcd-kvm/backup/"
# A tick's claim outlives any schedule's lateness; it is gone well before a day of them piles up.
CLAIM_TTL_SECONDS = 3600


class Skipped(Exception):
    """This member takes no backup at this tick, for a reason that is not a failure of the backup."""


# --- etcd, through etcdctl ---------------------------------------------------------------------


def etcdctl(config, args, stdin=None):
    env = {
        "PATH": "/usr/bin:/bin",
        "ETCDCTL_API": "3",
        "ETCDCTL_ENDPOINTS": config["etcd"]["endpoint"],
        "ETCDCTL_CACERT": config["etcd"]["ca_file"],
        "ETCDCTL_CERT": config["etcd"]["cert_file"],
        "ETCDCTL_KEY": config["etcd"]["key_file"],
        "ETCDCTL_COMMAND_TIMEOUT": "15s",
        "ETCDCTL_DIAL_TIMEOUT": "5s",
    }
    done = subprocess.run(
        [config["etcd"]["etcdctl"], *args], input=stdin, env=env, capture_output=True, timeout=600
    )
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise RuntimeError(f"etcdctl {args[0]}: {message[-1] if message else 'exit ' + str(done.returncode)}")
    return done.stdout


def tick_of(now):
    """The tick a timer run belongs to: its minute. Every member's timer fires on its own clock at the
    same calendar time, so all of them name the same minute (schedules finer than a minute are one tick)."""
    return now.strftime("%Y-%m-%dT%H:%M:00Z")


def claim(config, tick):
    """True when this member's etcd created the tick's key (it takes the backup); false when another had."""
    try:
        lease = json.loads(etcdctl(config, ["lease", "grant", str(CLAIM_TTL_SECONDS), "-w", "json"]))["ID"]
        key = f"{KEY_PREFIX}ticks/{tick}"
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


def record(config, name, value):
    etcdctl(config, ["put", f"{KEY_PREFIX}{name}"], stdin=json.dumps(value, sort_keys=True).encode())


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


def retention(names, prefix, keep, max_age_seconds=0, now=None):
    """The objects to delete so that the `keep` newest snapshots stay, and none older than `max_age_seconds`
    (0: no limit) but the newest: each such .dump, then its .key."""
    pattern = re.compile("^" + re.escape(prefix) + r"-(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z)\.dump$")
    dumps = sorted((datetime.datetime.fromisoformat(m.group(1)), name) for name in names if (m := pattern.match(name)))
    old = dumps[: max(len(dumps) - keep, 0)]
    if max_age_seconds and dumps:
        limit = (now or datetime.datetime.now(datetime.timezone.utc)) - datetime.timedelta(seconds=max_age_seconds)
        old = dumps[: max(len(old), len([d for d in dumps[:-1] if d[0] < limit]))]
    present = set(names)
    deleted = []
    for _, name in old:
        deleted.append(name)
        key = name[: -len(".dump")] + ".key"
        if key in present:
            deleted.append(key)
    return deleted


# --- S3, signed with AWS Signature Version 4 ---------------------------------------------------


def sign(method, url, region, access_key, secret_key, payload_hash, now, query=None, extra=None):
    """The headers of a SigV4-signed request (path-style, service s3); `extra` headers (x-amz-meta-*) are signed too."""
    parts = urllib.parse.urlsplit(url)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    scope = f"{now.strftime('%Y%m%d')}/{region}/s3/aws4_request"
    headers = {"host": parts.netloc, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date, **(extra or {})}
    signed = ";".join(sorted(headers))
    canonical_query = "&".join(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}" for k, v in sorted((query or {}).items())
    )
    canonical = "\n".join(
        [
            method,
            urllib.parse.quote(parts.path or "/", safe="/-_.~"),
            canonical_query,
            "".join(f"{name}:{headers[name]}\n" for name in sorted(headers)),
            signed,
            payload_hash,
        ]
    )
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret_key).encode()
    for part in (now.strftime("%Y%m%d"), region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"
    return headers


class Bucket:
    def __init__(self, s3, access_key, secret_key):
        self.s3, self.access_key, self.secret_key = s3, access_key, secret_key
        self.base = s3["endpoint"].rstrip("/") + "/" + s3["bucket"]

    def request(self, method, name="", query=None, body=None, payload_hash=hashlib.sha256(b"").hexdigest(), length=0, extra=None):
        url = self.base + ("/" + urllib.parse.quote(name, safe="/-_.~:") if name else "")
        parts = urllib.parse.urlsplit(url)
        now = datetime.datetime.now(datetime.timezone.utc)
        region = self.s3["region"] or "us-east-1"
        headers = sign(method, url, region, self.access_key, self.secret_key, payload_hash, now, query, extra)
        headers["content-length"] = str(length)
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=self.s3["ca_file"] or None)
            connection = http.client.HTTPSConnection(parts.netloc, timeout=300, context=context)
        else:
            connection = http.client.HTTPConnection(parts.netloc, timeout=300)
        path = parts.path + ("?" + urllib.parse.urlencode(sorted(query.items()), quote_via=urllib.parse.quote) if query else "")
        connection.request(method, path, body=body, headers=headers)
        answer = connection.getresponse()
        content = answer.read()
        connection.close()
        if answer.status >= 300:
            raise RuntimeError(f"S3 {method} {name or self.s3['bucket']}: HTTP {answer.status} {content[:200]!r}")
        return content

    def put_file(self, name, path, payload_hash, metadata=None):
        extra = {f"x-amz-meta-{key}": str(value) for key, value in (metadata or {}).items()}
        with open(path, "rb") as body:
            self.request("PUT", name, body=body, payload_hash=payload_hash, length=os.path.getsize(path), extra=extra)

    def put_bytes(self, name, data):
        self.request("PUT", name, body=data, payload_hash=hashlib.sha256(data).hexdigest(), length=len(data))

    def list(self, prefix):
        names, token = [], None
        for _ in range(1000):
            query = {"list-type": "2", "prefix": prefix, **({"continuation-token": token} if token else {})}
            root = ElementTree.fromstring(self.request("GET", query=query))
            space = {"s3": root.tag[1 : root.tag.index("}")]} if root.tag.startswith("{") else {}
            find = (lambda node, tag: node.findall(f"s3:{tag}", space)) if space else (lambda node, tag: node.findall(tag))
            names += [key.text for content in find(root, "Contents") for key in find(content, "Key")]
            truncated = [node.text for node in find(root, "IsTruncated")]
            tokens = [node.text for node in find(root, "NextContinuationToken")]
            if truncated != ["true"] or not tokens:
                return names
            token = tokens[0]
        raise RuntimeError(f"listing {prefix}* did not end after 1000 pages")

    def delete(self, name):
        self.request("DELETE", name)


# --- the run ------------------------------------------------------------------------------------


def read_secret(path):
    with open(path) as file:
        return file.read().strip()


def schedule_period(schedule):
    """Seconds between this schedule's next two elapses, as systemd computes them; None if it cannot say."""
    done = subprocess.run(
        ["systemd-analyze", "calendar", "--iterations=2", schedule], capture_output=True, env={"TZ": "UTC", "PATH": "/usr/bin:/bin"}
    )
    times = re.findall(r"(?:Next elapse|Iter\. #2): \w+ (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})", done.stdout.decode())
    if len(times) != 2:
        return None
    first, second = (datetime.datetime.strptime(t, "%Y-%m-%d %H:%M:%S") for t in times)
    return int((second - first).total_seconds())


def backup(config):
    started = datetime.datetime.now(datetime.timezone.utc)
    tick = tick_of(started)
    if not claim(config, tick):
        print(f"tick {tick}: another member took this tick's backup; none taken here")
        return 0
    s3 = config["s3"]
    # Named by the tick, which every member agrees on, rather than by this member's clock.
    name = dump_name(s3["object_prefix"], datetime.datetime.strptime(tick, "%Y-%m-%dT%H:%M:00Z"))
    run = {"member": config["member"], "tick": tick, "started": started.isoformat(), "object": name}
    work = config["work_dir"]
    snapshot, sealed = os.path.join(work, "snapshot.db"), os.path.join(work, "snapshot.sealed")
    try:
        for leftover in (snapshot, sealed, snapshot + ".part"):
            if os.path.exists(leftover):
                os.remove(leftover)
        etcdctl(config, ["snapshot", "save", snapshot])
        run["revision"] = snapshot_revision(config, snapshot)
        bucket = Bucket(s3, read_secret(config["secrets"]["access_key"]), read_secret(config["secrets"]["secret_key"]))
        if config["secrets"].get("encryption_key"):
            master = bytes.fromhex(read_secret(config["secrets"]["encryption_key"]))
            sealed_key, digest = seal_file(snapshot, sealed, master)
            # The key first: whoever sees the .dump can already open it (as the tool's own backup does).
            bucket.put_bytes(name[: -len(".dump")] + ".key", sealed_key)
            bucket.put_file(name, sealed, digest, {"revision": run["revision"]})
            run["size"] = os.path.getsize(sealed)
        else:
            with open(snapshot, "rb") as file:
                digest = hashlib.file_digest(file, "sha256").hexdigest()
            bucket.put_file(name, snapshot, digest, {"revision": run["revision"]})
            run["size"] = os.path.getsize(snapshot)
        names = bucket.list(s3["object_prefix"] + "-")
        deleted = retention(names, s3["object_prefix"], config["keep"], config.get("max_age_seconds", 0))
        for old in deleted:
            bucket.delete(old)
        run.update(outcome="ok", pruned=deleted)
    except Exception as error:  # noqa: BLE001 - every failure is recorded and logged with its reason
        run.update(outcome="failed", error=str(error)[:500])
    finally:
        for leftover in (snapshot, sealed):
            if os.path.exists(leftover):
                os.remove(leftover)
    run["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    run["period_seconds"] = schedule_period(config["schedule"])
    try:
        record(config, "last-run", run)
        if run["outcome"] == "ok":
            record(config, "last-success", run)
    except RuntimeError as error:
        print(f"tick {tick}: could not record the run in etcd: {error}", file=sys.stderr)
    if run["outcome"] != "ok":
        print(f"tick {tick}: backup failed: {run['error']}", file=sys.stderr)
        return 1
    print(f"tick {tick}: backed up revision {run['revision']} as {name} ({run['size']} bytes); pruned {len(run['pruned'])} object(s)")
    return 0


def main(argv):
    if argv[1:] != ["backup"]:
        print("usage: etcd-kvm-agent backup", file=sys.stderr)
        return 2
    with open(CONFIG) as file:
        config = json.load(file)
    try:
        return backup(config)
    except Skipped as skipped:
        print(str(skipped), file=sys.stderr)
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
