"""Runs pieces of the member agent (agent/etcd-kvm-agent.py) on the control node for the unit tests.

Usage: python3 agent-harness.py COMMAND JSON-ARGUMENT; prints a JSON answer. Where the guest has
PyNaCl and this machine may not, libsodium's XChaCha20-Poly1305 is stood in for by @noble/ciphers
(test/helpers/xchacha-seal.mjs): another implementation of the same construction.
"""

import contextlib
import datetime
import importlib.util
import io
import json
import os
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))


def encrypt(message, aad, nonce, key):
    assert aad is None
    answer = subprocess.run(
        ["node", os.path.join(HERE, "xchacha-seal.mjs")],
        input=json.dumps({"message": message.hex(), "nonce": nonce.hex(), "key": key.hex()}).encode(),
        capture_output=True,
        check=True,
    )
    return bytes.fromhex(answer.stdout.decode())


def decrypt(ciphertext, aad, nonce, key):
    assert aad is None
    answer = subprocess.run(
        ["node", os.path.join(HERE, "xchacha-seal.mjs")],
        input=json.dumps({"message": ciphertext.hex(), "nonce": nonce.hex(), "key": key.hex(), "open": True}).encode(),
        capture_output=True,
    )
    if answer.returncode != 0:
        raise ValueError(f"does not authenticate: {answer.stderr.decode()}")
    return bytes.fromhex(answer.stdout.decode())


try:
    import nacl.bindings  # noqa: F401
except ImportError:
    nacl = types.ModuleType("nacl")
    bindings = types.ModuleType("nacl.bindings")
    bindings.crypto_aead_xchacha20poly1305_ietf_encrypt = encrypt
    bindings.crypto_aead_xchacha20poly1305_ietf_decrypt = decrypt
    nacl.bindings = bindings
    sys.modules["nacl"], sys.modules["nacl.bindings"] = nacl, bindings

spec = importlib.util.spec_from_file_location("agent", os.path.join(HERE, "..", "..", "agent", "etcd-kvm-agent.py"))
agent = importlib.util.module_from_spec(spec)
spec.loader.exec_module(agent)

command, argument = sys.argv[1], json.loads(sys.argv[2])
if command == "seal":
    sealed_key, digest = agent.seal_file(argument["source"], argument["destination"], bytes.fromhex(argument["master_key"]))
    print(json.dumps({"key": sealed_key.hex(), "sha256": digest}))
elif command == "open":
    # A sealed object opened as a scheduled drill opens it: its key with the master key, then its chunks as they come.
    data_key = agent.open_sealed(bytes.fromhex(argument["master_key"]), bytes.fromhex(argument["key"]))

    def pieces():
        with open(argument["dump"], "rb") as dump:
            while piece := dump.read(argument["piece_bytes"]):
                yield piece

    import hashlib

    try:
        snapshot = b"".join(agent.opened_chunks(pieces(), data_key))
        print(json.dumps({"sha256": hashlib.sha256(snapshot).hexdigest(), "bytes": len(snapshot)}))
    except Exception as error:  # noqa: BLE001 - what the drill would call not intact
        print(json.dumps({"error": type(error).__name__}))
elif command == "judge-drill":
    outcome, findings = agent.judge_drill(argument["manifest"], argument["restored"])
    print(json.dumps({"outcome": outcome, "findings": findings}))
elif command == "drill-member":
    view = dict(argument["view"])
    view["statuses"] = {int(mid): status for mid, status in view["statuses"].items()}
    member, refused = agent.drill_member(view, argument["order"])
    print(json.dumps({"member": member} if member else {"refused": refused}))
elif command == "manifest":
    print(json.dumps(agent.manifest_text(argument["fields"], bytes.fromhex(argument["master_key"]))))
elif command == "judge-and-retain":
    # The agent's pruning decision: which snapshots are this cluster's own, and which objects go.
    now = datetime.datetime.fromisoformat(argument["now"])
    master = bytes.fromhex(argument["master_key"])
    trusted, ignored = agent.judge(argument["names"], argument["manifests"], argument["prefix"], argument["cluster"], master, now)
    deleted = agent.retention(
        trusted, set(argument["names"]), argument["keep"], argument.get("max_age_seconds", 0), now, argument.get("uploaded")
    )
    print(json.dumps({"trusted": [name for _, name in trusted], "ignored": [list(entry) for entry in ignored], "deleted": deleted}))
elif command == "sign":
    # botocore's signer reads the clock itself (datetime.datetime.utcnow in Debian's 1.29, get_current_datetime in
    # later releases, which a pyenv python3 on this machine may carry): fixed here.
    import botocore.auth

    fixed = datetime.datetime.strptime(argument["now"], "%Y%m%dT%H%M%SZ")

    class FixedClock(datetime.datetime):
        @classmethod
        def utcnow(cls):
            return fixed

        @classmethod
        def now(cls, tz=None):
            return fixed.replace(tzinfo=tz) if tz else fixed

    if hasattr(botocore.auth, "get_current_datetime"):
        botocore.auth.get_current_datetime = lambda *_, **__: fixed
    botocore.auth.datetime = types.SimpleNamespace(datetime=FixedClock, timezone=datetime.timezone, timedelta=datetime.timedelta)
    if "name" in argument:
        url = argument["base"] + "/" + agent.object_path(argument["name"])
    else:
        url = argument["url"]
    if argument.get("query"):
        url += "?" + agent.query_string(argument["query"])
    args = (argument["method"], url, argument["region"], argument["access_key"], argument["secret_key"])
    headers = agent.signed_headers(*args, argument["payload_hash"], argument.get("extra"))
    print(json.dumps({"url": url, "headers": headers}))
elif command == "s3-roundtrip":
    # The agent's S3 requests, as a backup run makes them, against an S3 endpoint: what each answered.
    import hashlib
    import tempfile

    bucket = agent.Bucket(argument["s3"], argument["access_key"], argument["secret_key"])
    name = argument["name"]
    answers = {}
    try:
        bucket.put_bytes(name + ".key", b"sealed key")
        with tempfile.NamedTemporaryFile() as dump:
            dump.write(b"sealed dump" * 1000)
            dump.flush()
            bucket.put_file(name + ".dump", dump.name, hashlib.sha256(b"sealed dump" * 1000).hexdigest(), {"revision": 7})
        answers["listed"] = bucket.list(argument["list_prefix"])
        answers["key"] = bucket.get(name + ".key", 1024).decode()
        bucket.delete(name + ".key")
        answers["after_delete"] = bucket.list(argument["list_prefix"])
    except RuntimeError as error:
        answers["error"] = str(error)
    print(json.dumps(answers))
elif command == "tick":
    fired = datetime.datetime.fromisoformat(argument["fired"]) if "fired" in argument else None
    print(json.dumps(agent.tick_of(datetime.datetime.fromisoformat(argument["started"]), argument["schedule"], fired)[0]))
elif command == "forked-at":
    # This harness's own start, as the agent reckons it, against the clock now: seconds ago.
    forked = agent.forked_at()
    print(json.dumps((datetime.datetime.now(datetime.timezone.utc) - forked).total_seconds() if forked else None))
elif command == "dump-name":
    print(json.dumps(agent.dump_name(argument["prefix"], datetime.datetime.fromisoformat(argument["when"]))))
elif command == "rule-holds":
    print(json.dumps(agent.rule_holds(argument["size"], argument["in_use"], argument["rule"], argument["quota"])))
elif command == "decide":
    view = dict(argument["view"])
    view["statuses"] = {int(mid): status for mid, status in view["statuses"].items()}
    print(json.dumps(list(agent.decide(view, argument["rule"], argument["quota"], argument["disarm_below"]))))
elif command == "drift":
    print(json.dumps(agent.managed_file_drift(argument["manifest"])))
elif command in ("defrag-tick", "metrics-tick", "backup-tick"):
    # A whole defrag tick, or the metrics task alone, against canned etcdctl answers (by its first
    # three arguments, its first two, or its first): prints its exit code, the etcdctl calls it made and the metrics file it wrote.
    # An answer {"in_turn": [a, b, …]} is a at the first such call, b at the next, …; a string is printed as it is
    # (as `get --print-value-only` prints a value).
    calls = []
    asked = {}

    def canned(config, args, stdin=None, partial=False, command_timeout="15s"):
        calls.append(args)
        # The longest of its first three, two or one arguments that has an answer.
        key = next((" ".join(args[:n]) for n in (3, 2) if " ".join(args[:n]) in argument["answers"]), args[0])
        answer = argument["answers"].get(key)
        if isinstance(answer, dict) and "in_turn" in answer:
            asked[key] = asked.get(key, 0) + 1
            answer = answer["in_turn"][min(asked[key], len(answer["in_turn"])) - 1]
        if answer is None:
            raise RuntimeError(f"etcdctl {args[0]}: no canned answer")
        if isinstance(answer, dict) and "fails" in answer:
            raise RuntimeError(f"etcdctl {args[0]}: {answer['fails']}")
        return answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()

    agent.etcdctl = canned
    agent.RECORD_RETRY_SECONDS = 0
    said = io.StringIO()
    task = {"defrag-tick": agent.defrag, "metrics-tick": agent.write_metrics, "backup-tick": agent.backup}[command]
    skipped = None
    with contextlib.redirect_stdout(said):
        try:
            code = task(argument["config"])
        except agent.Skipped as why:
            code, skipped = None, str(why)
    staging = argument["config"].get("metrics", {}).get("staging")
    metrics = open(staging).read() if staging and os.path.exists(staging) else None
    print(json.dumps({"code": code, "calls": calls, "metrics": metrics, "said": said.getvalue(), "skipped": skipped}))
else:
    sys.exit(f"unknown command {command}")
