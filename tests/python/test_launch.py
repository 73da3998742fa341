"""python3 -m tccl.launch: N ranks with torchrun's variables; a failing rank ends the job."""

import hashlib
import json
import os
import re
import subprocess
import sys
import time

from ranks import WORKERS

SCRIPT = os.path.join(WORKERS, "launch_worker.py")


def json_objects(text):
    """Every JSON object in text (the ranks share one stdout, so lines may interleave)."""
    decoder, out, i = json.JSONDecoder(), [], text.find("{")
    while i >= 0:
        obj, end = decoder.raw_decode(text, i)
        out.append(obj)
        i = text.find("{", end)
    return out


def launch(*args, timeout=60, env_drop=(), env_extra=None):
    env = dict(os.environ, TCCL_DEBUG="NONE", **(env_extra or {}))
    for k in ("TCCL_STORE",) + tuple(env_drop):
        env.pop(k, None)
    return subprocess.run([sys.executable, "-m", "tccl.launch", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_three_ranks_get_their_variables_and_reduce():
    p = launch("--nproc-per-node", "3", SCRIPT, "ok")
    assert p.returncode == 0, p.stderr
    rows = json_objects(p.stdout)
    assert len(rows) == 3, p.stdout
    assert sorted(int(r["env"]["RANK"]) for r in rows) == [0, 1, 2]
    ports = {r["env"]["MASTER_PORT"] for r in rows}
    assert len(ports) == 1 and int(ports.pop()) > 0
    for r in rows:
        e = r["env"]
        assert e["WORLD_SIZE"] == e["TCCL_WORLD_SIZE"] == e["LOCAL_WORLD_SIZE"] == "3"
        assert e["RANK"] == e["TCCL_RANK"] == e["LOCAL_RANK"]
        assert e["MASTER_ADDR"] == "127.0.0.1"
        assert r["sum"] == 9.0


def test_a_failing_rank_ends_the_job_with_its_status():
    t0 = time.monotonic()
    p = launch("--nproc-per-node", "3", SCRIPT, "fail", "7", timeout=50)
    elapsed = time.monotonic() - t0
    assert p.returncode == 7, (p.returncode, p.stderr)
    assert "rank 1 exited with status 7" in p.stderr
    assert elapsed < 30  # the sleeping ranks were killed, not waited for


def test_timeout_kills_every_rank():
    t0 = time.monotonic()
    p = launch("--nproc-per-node", "2", "--timeout", "1", SCRIPT, "fail", "0", timeout=50)
    # rank 1 exits 0 at once; rank 0 sleeps: the launcher's deadline ends it.
    assert p.returncode == 124, (p.returncode, p.stderr)
    assert time.monotonic() - t0 < 30


def test_usage_errors():
    p = launch("--nproc-per-node", "0", SCRIPT)
    assert p.returncode == 2 and "at least 1" in p.stderr


# ---- output: whole lines, tagged with the rank --------------------------------------------

# Every rank writes its lines in chunks of one to three bytes, straight to fds 1 and 2 (no
# Python buffering), sleeping between chunks so that the ranks' writes interleave; the last
# line of stdout has no newline.
CHUNKS_WORKER = r'''
import os, sys, time
rank = int(os.environ["RANK"])
def chunked(fd, text):
    i = 0
    while i < len(text):
        n = 1 + (i + rank) % 3
        os.write(fd, text[i:i + n].encode())
        i += n
        time.sleep(0.0003)
for k in range(LINES):
    chunked(1, f"r{rank} line {k} " + "x" * (k % 9 + 1) + "\n")
    if k % 5 == 0:
        chunked(2, f"r{rank} err {k}\n")
chunked(1, f"r{rank} tail without newline")
'''


def write_worker(tmp_path, name, text, **subst):
    for k, v in subst.items():
        text = text.replace(k, str(v))
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_output_lines_are_whole_and_tagged(tmp_path):
    lines = 40
    script = write_worker(tmp_path, "chunks.py", CHUNKS_WORKER, LINES=lines)
    p = launch("--nproc-per-node", "3", script)
    assert p.returncode == 0, p.stderr
    out = p.stdout.split("\n")
    assert out[-1] == ""  # the partial last lines were ended too
    seen = {r: [] for r in range(3)}
    tails = set()
    for line in out[:-1]:
        m = re.fullmatch(r"\[rank (\d)\] r(\d) (?:line (\d+) (x+)|tail without newline)", line)
        assert m, f"not a whole tagged line: {line!r}\n{p.stdout}"
        assert m.group(1) == m.group(2), line  # tagged with the rank that wrote it
        r = int(m.group(1))
        if m.group(3) is None:
            tails.add(r)
        else:
            k = int(m.group(3))
            assert m.group(4) == "x" * (k % 9 + 1), line
            seen[r].append(k)
    assert tails == {0, 1, 2}
    for r in range(3):
        assert seen[r] == list(range(lines)), (r, seen[r])  # each rank's lines in order
    err = [ln for ln in p.stderr.split("\n") if ln]
    for line in err:
        assert re.fullmatch(r"\[rank (\d)\] r\1 err \d+", line), f"stderr: {line!r}"
    assert len(err) == 3 * len(range(0, lines, 5))


def test_no_tag_output_passes_output_through(tmp_path):
    # One write(2) per line: untagged output of two ranks shares one pipe, and print()'s
    # pieces ('plain', ' ', the rank, '\n') are separate writes when stdout is unbuffered,
    # which let two ranks' lines interleave ("plainplain") about one run in six.
    script = write_worker(tmp_path, "one.py",
                          "import os\nos.write(1, f\"plain {os.environ['RANK']}\\n\".encode())\n")
    p = launch("--nproc-per-node", "2", "--no-tag-output", script)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.split()) == ["0", "1", "plain", "plain"]


def test_a_failing_rank_s_last_words_are_shown(tmp_path):
    script = write_worker(tmp_path, "dies.py", (
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    sys.stderr.write('dying now')\n"  # no newline, and then gone
        "    sys.exit(3)\n"
        "time.sleep(60)\n"))
    p = launch("--nproc-per-node", "2", script, timeout=50)
    assert p.returncode == 3, p.stderr
    assert "[rank 1] dying now\n" in p.stderr
    assert "rank 1 exited with status 3" in p.stderr


# ---- the job key ----------------------------------------------------------------------------

# Every rank reports a digest of its TCCL_AUTH_KEY (never the key) and all-reduces; rank 0
# then tries its own store without the key, as a stranger would, before anyone leaves.
AUTH_WORKER = r'''
import hashlib, json, os, re
import numpy as np
import tccl
key = os.environ.get("TCCL_AUTH_KEY", "")
c = tccl.init_process_group()
x = np.array([1.0])
c.all_reduce(x)
refused = None
if c.rank == 0:
    os.environ.pop("TCCL_AUTH_KEY")
    try:
        s = tccl.TcpStore("127.0.0.1", int(os.environ["MASTER_PORT"]), connect_timeout_ms=3000)
        s.set("stranger", b"1")
        refused = False
    except tccl.Error as e:
        refused = True
    os.environ["TCCL_AUTH_KEY"] = key
c.barrier()
print(json.dumps({"rank": c.rank, "sum": x[0], "hex": bool(re.fullmatch("[0-9a-f]{64}", key)),
                  "digest": hashlib.sha256(key.encode()).hexdigest(), "refused": refused}))
tccl.destroy_process_group()
'''


def test_a_job_key_is_made_for_the_job(tmp_path):
    script = write_worker(tmp_path, "auth.py", AUTH_WORKER)
    digests = []
    for _ in range(2):
        p = launch("--nproc-per-node", "2", script, env_drop=("TCCL_AUTH_KEY", "TCCL_AUTH_KEY_FILE"))
        assert p.returncode == 0, p.stdout + p.stderr
        rows = json_objects(p.stdout)
        assert len(rows) == 2, p.stdout
        assert all(r["hex"] and r["sum"] == 2.0 for r in rows), rows
        assert len({r["digest"] for r in rows}) == 1  # one key for the whole job
        assert rows[0]["refused"] is True or rows[1]["refused"] is True, rows  # rank 0's
        digests.append(rows[0]["digest"])
    assert digests[0] != digests[1]  # every job a key of its own


def test_a_given_job_key_is_passed_on(tmp_path):
    script = write_worker(tmp_path, "auth.py", AUTH_WORKER)
    key = "ab" * 32
    p = launch("--nproc-per-node", "2", script, env_extra={"TCCL_AUTH_KEY": key})
    assert p.returncode == 0, p.stdout + p.stderr
    rows = json_objects(p.stdout)
    assert len(rows) == 2, p.stdout
    want = hashlib.sha256(key.encode()).hexdigest()
    assert all(r["digest"] == want for r in rows), rows


def test_job_key_env_keeps_a_key_file():
    from tccl.launch import job_key_env
    assert job_key_env({"TCCL_AUTH_KEY_FILE": "/k"}) == {"TCCL_AUTH_KEY_FILE": "/k"}
    made = job_key_env({"TCCL_AUTH_KEY": "", "TCCL_AUTH_KEY_FILE": ""})
    assert re.fullmatch("[0-9a-f]{64}", made["TCCL_AUTH_KEY"]) and "TCCL_AUTH_KEY_FILE" not in made


def test_job_key_env_makes_no_key_under_the_opt_out():
    from tccl.launch import job_key_env
    # TCCL_AUTH=off (docs/security.md) runs the job unauthenticated on purpose: no key.
    assert job_key_env({"TCCL_AUTH": "off"}) == {"TCCL_AUTH": "off"}
    made = job_key_env({"TCCL_AUTH": "on"})
    assert re.fullmatch("[0-9a-f]{64}", made["TCCL_AUTH_KEY"])
