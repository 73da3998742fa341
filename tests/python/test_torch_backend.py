"""torch.distributed.init_process_group("tccl"): every operation, DDP vs Gloo (with the
standard comm hooks and gradient_as_bucket_view), BAND/BOR/BXOR and sparse all-reduce,
a group dropped in its own future's callback, and TCCL_SOCKET_IFNAME with MASTER_ADDR set (in
a network namespace).

Skipped when torch or the backend module is not built (docs/python.md)."""

import json

import pytest

from ranks import check_all_ok, run_ranks

torch = pytest.importorskip("torch")
pytest.importorskip("tccl._tccl_torch")


@pytest.mark.parametrize("world", [3])
def test_every_operation(world):
    results = check_all_ok(run_ranks("torch_worker.py", world, torch_store=True, timeout=90))
    for r in results:
        last = r.stdout.strip().splitlines()[-1]
        assert last.startswith("OK ") and int(last.split()[1]) > 30, repr(r)


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_matches_gloo(world):
    results = check_all_ok(run_ranks("ddp_worker.py", world, torch_store=True, timeout=120))
    runs = [json.loads(r.stdout.strip().splitlines()[-1]) for r in results]
    for run in runs:
        for name in ("tccl", "gloo"):
            for got, ref in zip(run[name], run["reference"]):
                assert torch.allclose(torch.tensor(got), torch.tensor(ref), atol=1e-5), name
        for t, g in zip(run["tccl"], run["gloo"]):
            assert torch.allclose(torch.tensor(t), torch.tensor(g), atol=1e-6, rtol=1e-5)
    # every rank ends with the same parameters
    for run in runs[1:]:
        assert run["tccl"] == runs[0]["tccl"]
    # and training moved them
    moved = max(abs(a - b) for t, i in zip(runs[0]["tccl"], runs[0]["initial"])
                for a, b in zip(t, i))
    assert moved > 1e-3


@pytest.mark.parametrize("world", [2, 3])
def test_bitwise_ops_and_sparse_all_reduce(world):
    results = check_all_ok(run_ranks("torch_ops_worker.py", world, torch_store=True,
                                     timeout=120))
    for r in results:
        last = r.stdout.strip().splitlines()[-1]
        assert last.startswith("OK ") and int(last.split()[1]) >= 65, repr(r)


# A group whose last reference goes in its own future's callback is destroyed on its own
# completion thread: that thread must not wait on itself, and every thread the group started
# must end (before the fix, each such thread hung in the Completer's destructor for good).
def test_group_dropped_in_its_own_callback():
    results = check_all_ok(run_ranks("torch_teardown_worker.py", 2, torch_store=True,
                                     timeout=90))
    for r in results:
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["values_ok"], repr(r)
        assert out["off_main"] == 3, repr(r)  # three groups dropped on a completion thread
        assert out["attached"] == 0, repr(r)  # and their communicators are gone
        assert out["threads_after"] <= out["threads_before"], repr(r)


# DDP's standard comm hooks and gradient_as_bucket_view, tccl against gloo from the same
# seeds. At world 2 every all-reduce adds two numbers, which both backends round the same
# way: losses and parameters are equal bit for bit. At world 4 the order of the additions
# differs between the backends' algorithms, so the results agree to rounding.
HOOK_CONFIGS = ["none", "none+view", "allreduce", "allreduce+view", "fp16", "fp16+view",
                "bf16", "bf16+view", "powersgd", "powersgd+view"]


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_comm_hooks_and_bucket_view_match_gloo(world):
    results = check_all_ok(run_ranks("ddp_hooks_worker.py", world, HOOK_CONFIGS,
                                     torch_store=True, timeout=240))
    runs = [json.loads(r.stdout.strip().splitlines()[-1]) for r in results]
    for config in HOOK_CONFIGS:
        for run in runs:
            t, g = run[config]["tccl"], run[config]["gloo"]
            if world == 2:
                assert t["losses"] == g["losses"], config
                assert t["params"] == g["params"], config
            else:
                assert torch.allclose(torch.tensor(t["losses"]), torch.tensor(g["losses"]),
                                      rtol=1e-3, atol=1e-4), config
                for a, b in zip(t["params"], g["params"]):
                    assert torch.allclose(torch.tensor(a), torch.tensor(b), rtol=1e-3,
                                          atol=1e-4), config
        # Every rank ends with the same parameters, and training moved them.
        for run in runs[1:]:
            assert run[config]["tccl"]["params"] == runs[0][config]["tccl"]["params"], config
        first = runs[0][config]
        moved = max(abs(a - b) for p, i in zip(first["tccl"]["params"], first["initial"])
                    for a, b in zip(p, i))
        assert moved > 1e-3, config
    # The compressing hooks really compressed: fp16 differs from the uncompressed run.
    assert runs[0]["fp16"]["tccl"]["params"] != runs[0]["none"]["tccl"]["params"]
    assert runs[0]["powersgd"]["tccl"]["params"] != runs[0]["none"]["tccl"]["params"]


# TCCL_SOCKET_IFNAME with MASTER_ADDR set: in a network namespace of its own with two
# interfaces (a veth pair, 10.213.7.1 and 10.213.8.1), MASTER_ADDR names the first. Unset,
# tccl listens on the route to MASTER_ADDR; set, TCCL_SOCKET_IFNAME chooses, by name or
# by CIDR; matching nothing, every rank fails, rank 0 naming the variable.
_NETNS_SETUP = ("ip link set lo up && ip link add tcclA type veth peer name tcclB && "
                "ip addr add 10.213.7.1/24 dev tcclA && ip addr add 10.213.8.1/24 dev tcclB && "
                "ip link set tcclA up && ip link set tcclB up")
_NETNS_DRIVER = """
import json, sys
sys.path.insert(0, {here!r})
from ranks import run_ranks
out = {{}}
for name, ifname in [("route", None), ("byname", "=tcclB"), ("bycidr", "10.213.8.0/24"),
                     ("nomatch", "=nosuch9")]:
    # Beyond the loopback a rank listens only with a job key (docs/security.md).
    env = {{"TCCL_AUTH_KEY": "5" * 64}}
    if ifname:
        env["TCCL_SOCKET_IFNAME"] = ifname
    res = run_ranks("torch_iface_worker.py", 2, torch_store=True, timeout=60, env=env,
                    per_rank_env=lambda r: {{"MASTER_ADDR": "10.213.7.1"}})
    out[name] = [[r.returncode, r.stdout.strip().splitlines()[-1:] or [r.stderr[-500:]]]
                 for r in res]
print(json.dumps(out))
"""


def test_socket_ifname_is_honoured_when_master_addr_is_set():
    import os
    import shutil
    import subprocess
    import sys
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        pytest.skip("needs root, unshare and ip for a network namespace")
    here = os.path.dirname(os.path.abspath(__file__))
    probe = subprocess.run(["unshare", "-n", "sh", "-c", _NETNS_SETUP], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no network namespace with a veth pair here: {probe.stderr!r}")
    proc = subprocess.run(
        ["unshare", "-n", "sh", "-c",
         _NETNS_SETUP + " && exec \"$0\" -c \"$1\"", sys.executable,
         _NETNS_DRIVER.format(here=here)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, want in [("route", "10.213.7.1"), ("byname", "10.213.8.1"),
                       ("bycidr", "10.213.8.1")]:
        assert out[name] == [[0, [f"ADDR {want}"]]] * 2, (name, out[name])
    # Every rank fails (none hangs); rank 0 (the store's host) names the variable. The
    # others may first see the store go with it.
    assert [rc for rc, _ in out["nomatch"]] == [3, 3], out
    first = out["nomatch"][0][1][0]
    assert "TCCL_SOCKET_IFNAME" in first and "nosuch9" in first, out
