"""The server's audit-bundle verdicts are the framework's own: every case is verified twice, by
agentfootprint 9.62.0's `verifyAuditBundle` under Node and by `POST /api/v1/audit-bundles`, over
the same bytes, and the answers compared field by field.

The framework's verifier is the part of its build kept in tests/data/agentfootprint-9.62.0/.
"""

import json
import shutil
import subprocess
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from ledger.audits.verify import ZERO_HASH, record_hash
from tests.conftest import DATA, load_fixture

pytestmark = pytest.mark.django_db

VERIFIER = DATA / "agentfootprint-9.62.0/dist/esm/adapters/observability/audit.js"
FRAMEWORK_FIELDS = ("valid", "recordsChecked", "brokenAt", "reason")

# Reads the cases (JSON texts) on stdin; answers one verdict per case, or what it threw.
NODE_SCRIPT = """
import { readFileSync } from 'node:fs';
const { verifyAuditBundle } = await import(process.argv[1]);
const cases = JSON.parse(readFileSync(0, 'utf8'));
const answers = cases.map((text) => {
  try { return { verdict: verifyAuditBundle(JSON.parse(text)) }; }
  catch (err) { return { threw: String(err) }; }
});
process.stdout.write(JSON.stringify(answers));
"""


def framework_verdicts(texts: list[str]) -> list[dict[str, Any]]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("Node is missing: these tests run the framework's own verifier; apt-get install nodejs.")
    if not VERIFIER.is_file():
        pytest.fail(f"The framework's verifier is missing from this clone: {VERIFIER} (see its folder's README).")
    done = subprocess.run(
        [node, "--input-type=module", "-e", NODE_SCRIPT, VERIFIER.as_uri()],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _bundle() -> dict[str, Any]:
    return load_fixture("f-audit/bundle.json")


def _segments() -> list[dict[str, Any]]:
    return load_fixture("f-audit/segments.json")["segments"]


def _rehash(bundle: dict[str, Any], start: int) -> dict[str, Any]:
    """Recompute the chain from record `start` on, as a forger holding the only copy would."""
    records = bundle["records"]
    previous = records[start - 1]["hash"] if start else bundle["header"]["chainHead"]
    for record in records[start:]:
        record["prevHash"] = previous
        record["hash"] = previous = record_hash(record)
    bundle["finalHash"] = previous
    bundle["header"]["recordCount"] = len(records)
    return bundle


def _edit(change) -> dict[str, Any]:
    bundle = _bundle()
    change(bundle)
    return bundle


def _without(index: int, adjust_count: bool) -> dict[str, Any]:
    bundle = _bundle()
    del bundle["records"][index]
    if adjust_count:
        bundle["header"]["recordCount"] -= 1
    return bundle


def _swapped(a: int, b: int) -> dict[str, Any]:
    bundle = _bundle()
    records = bundle["records"]
    records[a], records[b] = records[b], records[a]
    return bundle


def _head_cut(keep_first_seq_zero: bool, forge_head: bool, k: int = 3) -> dict[str, Any]:
    bundle = _bundle()
    survivor = bundle["records"][k]
    bundle["records"] = bundle["records"][k:]
    bundle["header"]["recordCount"] = len(bundle["records"])
    bundle["header"]["firstSeq"] = 0 if keep_first_seq_zero else k
    bundle["header"]["chainHead"] = survivor["prevHash"] if forge_head else ZERO_HASH
    return bundle


def _header(**fields: Any) -> dict[str, Any]:
    bundle = _bundle()
    bundle["header"].update(fields)
    return bundle


def _record(index: int, value: Any) -> dict[str, Any]:
    bundle = _bundle()
    bundle["records"][index] = value
    return bundle


def _byte_edit(raw: str, seq: int) -> str:
    """One character of a string in record `seq`'s payload changed, in the bytes as sent."""
    start = raw.index(f'"seq": {seq},')
    at = raw.index('"eventType": "', start) + len('"eventType": "') + 3
    return raw[:at] + ("x" if raw[at] != "x" else "y") + raw[at + 1 :]


def _as_text(document: Any) -> str:
    return document if isinstance(document, str) else json.dumps(document, ensure_ascii=False)


def _segment_pair(change) -> list[dict[str, Any]]:
    first, second = _segments()
    change(first, second)
    return [first, second]


# Every reason the framework's verifier can give (read from audit.js), each reached at least once.
CASES: dict[str, Any] = {
    "the fixture bundle": lambda: _bundle(),
    "the fixture's tampered byte": lambda: (DATA / "f-audit/bundle-tampered-byte.json").read_text(),
    "an edited byte in an event type": lambda: _byte_edit((DATA / "f-audit/bundle.json").read_text(), 20),
    "an edited payload value": lambda: _edit(lambda b: b["records"][7]["payload"].update(runId="run-forged")),
    "a field added to a payload": lambda: _edit(lambda b: b["records"][2]["payload"].update(added=True)),
    "a field added to a record": lambda: _edit(lambda b: b["records"][9].update(note="added")),
    "a middle record deleted, count adjusted": lambda: _without(3, adjust_count=True),
    "a middle record deleted, count kept": lambda: _without(3, adjust_count=False),
    "the last record deleted, count adjusted": lambda: _without(51, adjust_count=True),
    "records 4 and 5 swapped": lambda: _swapped(4, 5),
    "a record's seq edited": lambda: _edit(lambda b: b["records"][6].update(seq=60)),
    "a record's seq written as text": lambda: _edit(lambda b: b["records"][6].update(seq="6")),
    "a record's prevHash edited and its hash recomputed": lambda: _edit(
        lambda b: (b["records"][8].update(prevHash="f" * 64), b["records"][8].update(hash=record_hash(b["records"][8])))
    ),
    "a record rewritten and the chain recomputed after it": lambda: _edit(
        lambda b: (b["records"][10]["payload"].update(forged=1), _rehash(b, 10))
    ),
    "the finalHash altered": lambda: _edit(lambda b: b.update(finalHash="0" * 63 + "1")),
    "a record that is null": lambda: _record(5, None),
    "a record that is text": lambda: _record(5, "seq 5"),
    "a record that is an array": lambda: _record(5, [5]),
    "recordCount too high": lambda: _header(recordCount=53),
    "recordCount as text": lambda: _header(recordCount="52"),
    "recordCount null": lambda: _header(recordCount=None),
    "recordCount missing": lambda: _edit(lambda b: b["header"].pop("recordCount")),
    "recordCount as a fraction": lambda: _header(recordCount=51.5),
    "recordCount written 52.0": lambda: json.dumps(_bundle()).replace('"recordCount": 52', '"recordCount": 52.0'),
    "an unknown format": lambda: _header(format="agentfootprint.audit/2"),
    "no format": lambda: _edit(lambda b: b["header"].pop("format")),
    "a format that is an object": lambda: _header(format={"v": 1}),
    "a format that is an array": lambda: _header(format=["agentfootprint.audit/1", 2]),
    "an unknown hashAlgorithm": lambda: _header(hashAlgorithm="sha-512"),
    "an unknown canonicalization": lambda: _header(canonicalization="jcs"),
    "a header that is text": lambda: _edit(lambda b: b.update(header="agentfootprint.audit/1")),
    "a truncated head claiming firstSeq 0": lambda: _head_cut(keep_first_seq_zero=True, forge_head=True),
    "a truncated head on the zero hash": lambda: _head_cut(keep_first_seq_zero=False, forge_head=False),
    "a truncated head declaring where it starts": lambda: _head_cut(keep_first_seq_zero=False, forge_head=True),
    "firstSeq written 0.0": lambda: json.dumps(_bundle()).replace('"firstSeq": 0', '"firstSeq": 0.0'),
    "firstSeq as text": lambda: _header(firstSeq="0"),
    "firstSeq missing": lambda: _edit(lambda b: b["header"].pop("firstSeq")),
    "firstSeq null": lambda: _header(firstSeq=None),
    "firstSeq true": lambda: _header(firstSeq=True),
    "records that are not a list": lambda: _edit(lambda b: b.update(records={"0": b["records"][0]})),
    "a finalHash that is not text": lambda: _edit(lambda b: b.update(finalHash=None)),
    "an empty bundle": lambda: _edit(
        lambda b: (b.update(records=[], finalHash=ZERO_HASH), b["header"].update(recordCount=0))
    ),
    "an empty bundle, count kept": lambda: _edit(lambda b: b.update(records=[], finalHash=ZERO_HASH)),
    "the two fixture segments": lambda: _segments(),
    "the two segments reversed": lambda: _segments()[::-1],
    "the second segment alone": lambda: _segments()[1],
    "the first segment alone": lambda: [_segments()[0]],
    "the second segment's firstSeq moved": lambda: _segment_pair(lambda a, b: b["header"].update(firstSeq=53)),
    "the second segment's firstSeq as text": lambda: _segment_pair(lambda a, b: b["header"].update(firstSeq="52")),
    "the second segment's chainHead edited": lambda: _segment_pair(lambda a, b: b["header"].update(chainHead="e" * 64)),
    "a byte edited in the second segment": lambda: _segment_pair(
        lambda a, b: b["records"][4]["payload"].update(edited=True)
    ),
    "the second segment's recordCount wrong": lambda: _segment_pair(lambda a, b: b["header"].update(recordCount=1)),
    "the second segment's format unknown": lambda: _segment_pair(lambda a, b: b["header"].update(format="x")),
    "the first segment's finalHash altered": lambda: _segment_pair(lambda a, b: a.update(finalHash="1" * 64)),
    "a segment that is an array": lambda: [_segments()[0], []],
    "a segment missing its header": lambda: _segment_pair(lambda a, b: b.pop("header")),
    "a segment that is a number": lambda: [_segments()[0], 7],
    "no segments": lambda: [],
    "a number": lambda: 52,
    "text": lambda: json.dumps("agentfootprint.audit/1"),
    "an object without a header": lambda: {"records": [], "finalHash": ZERO_HASH},
    "a bundle with a null header": lambda: _edit(lambda b: b.update(header=None)),
    "null": lambda: None,
}


@pytest.fixture(scope="module")
def framework() -> dict[str, tuple[str, dict[str, Any]]]:
    """Each case's bytes and what the framework answered for them (once for the module)."""
    texts = {name: _as_text(make()) for name, make in CASES.items()}
    answers = framework_verdicts(list(texts.values()))
    return {name: (text, answer) for (name, text), answer in zip(texts.items(), answers, strict=True)}


def _framework_fields(verdict: dict[str, Any]) -> dict[str, Any]:
    return {key: verdict[key] for key in FRAMEWORK_FIELDS if key in verdict}


@pytest.mark.parametrize("name", list(CASES))
def test_the_servers_verdict_is_the_frameworks(name, framework, agent_client):
    text, answer = framework[name]
    response = agent_client.post("/api/v1/audit-bundles", text.encode(), content_type="application/json")

    if response.status_code == 422:
        # Nothing the server could store: it refuses, quoting the framework's reason word for word
        # (or, where the framework throws on JSON's null, the one it gives a missing part).
        refusal = response.json()
        assert refusal["code"] == "ERR_INVALID_AUDIT_BUNDLE"
        if "verdict" in answer:
            assert answer["verdict"]["valid"] is False
            quoted = f"verifyAuditBundle: {answer['verdict']['reason']}."
            assert any(isinstance(text, str) and quoted in text for text in refusal.values()), refusal
        else:
            assert "null" in answer["threw"], answer
        return
    assert response.status_code == 201, response.content[:300]
    assert "verdict" in answer, f"the framework threw ({answer}) where the server answered {response.json()}"
    assert _framework_fields(response.json()) == answer["verdict"]


def test_segments_sent_as_an_object_get_the_verdict_of_the_list_inside(framework, agent_client):
    """{segments: [...]} is the server's own wrapping of drained segments: the verdict is the
    framework's for the list it wraps."""
    _, answer = framework["the second segment's chainHead edited"]
    first, second = _segments()
    second["header"]["chainHead"] = "e" * 64
    response = agent_client.post_json("/api/v1/audit-bundles", {"segments": [first, second]})
    assert _framework_fields(response.json()) == answer["verdict"]


def test_every_reason_the_framework_gives_is_reached(framework):
    """The cases reach each of the framework's reasons (audit.js), so none is compared untested."""
    verdicts = [answer["verdict"] for _, answer in framework.values() if "verdict" in answer]
    reasons = {v.get("reason", "").split(" — ")[0].split(" '")[0] for v in verdicts}
    expected = {
        "no bundles supplied",
        "bundle is not an object (segment 1)",
        "bundle missing header/records/finalHash",
        "unsupported format",
        "unsupported hashAlgorithm",
        "unsupported canonicalization",
        "segment discontinuity",
        "head-truncation guard",
        "sequence mismatch",
        "chain broken",
        "hash mismatch",
        "finalHash does not match the last record's hash",
    }
    assert expected <= reasons, expected - reasons
    assert any(r.startswith("recordCount ") for r in reasons)
    assert any(r.startswith("record at seq ") for r in reasons)


def test_the_verify_page_shows_the_frameworks_verdict(framework, auditor_client, project):
    """Verifying an upload without storing it uses the same selector: the framework's verdict."""
    text, answer = framework["a middle record deleted, count adjusted"]
    upload = SimpleUploadedFile("bundle.json", text.encode(), "application/json")
    response = auditor_client.post("/audit-bundles/", {"project": project.pk, "bundle": upload})
    assert response.status_code == 200
    page = response.content.decode()
    assert answer["verdict"]["reason"] in page
    assert f"Broken at record {answer['verdict']['brokenAt']}:" in page
