"""The scale rig's quick mode (`QUICK=1 bench/scale.sh`, docs/bench.md,
Scale): 10 fake dispatchers x 10 slots over CURVE against a real
controller, trials reporting metrics, users steering them with waited
`trial set`, the web API read. Asserts that every point the controller
acknowledged is in the store, that every trial started and said hello,
and that the rig saw no error reply. No timing is asserted (a batch that
fell behind on a loaded machine is not a failure here)."""
import json
import os
import subprocess

from conftest import BUILD, ROOT


def test_quick_scale_run_loses_nothing(tmp_path):
    rig = os.path.join(BUILD, "bench", "scale_rig")
    if not os.path.exists(rig):
        subprocess.run(["make", "--no-print-directory", f"BUILD={BUILD}", rig], cwd=ROOT,
                       check=True, capture_output=True, timeout=120)
    out = tmp_path / "scale.json"
    env = dict(os.environ, QUICK="1", BUILD=os.path.relpath(BUILD, ROOT), OUT=str(out),
               PYTHON="/usr/bin/python3")
    p = subprocess.run([os.path.join(ROOT, "bench", "scale.sh")], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(out.read_text())
    (lv,) = res["levels"]
    assert lv["registered"] == 10 and lv["starts"] == 100 and lv["running"] == 100, lv
    assert lv["points_acked"] > 0 and lv["set_n"] > 0, lv
    assert lv["stored"] >= lv["points_acked"], lv  # acknowledged => persisted
    assert res["lost"] == 0 and lv["errors"] == 0 and lv["set_failed"] == 0, lv
    assert lv["api_n"] > 0 and lv["api_failed"] == 0, lv


def test_controller_listen_queue_takes_a_burst_of_connections(jz):
    """Thousands of trials connect at once when a large study starts; with
    ZeroMQ's default listen queue (100) the kernel dropped the SYNs beyond
    it and those peers waited seconds to minutes (bench/scale.sh). The
    controller's listening socket now has a queue of 4096 (capped by
    net.core.somaxconn): `ss` shows it as the listener's Send-Q."""
    import shutil
    import socket
    ss = shutil.which("ss") or "/usr/sbin/ss"
    if not os.path.exists(ss):
        import pytest
        pytest.skip("no `ss` (iproute2) to read the listen queue's size")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ctl = jz.popen("controller", "--db", jz.db, "--bind", f"tcp://127.0.0.1:{port}",
                   "--insecure")
    try:
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 20, "the controller")
        out = subprocess.run([ss, "-ltnH", f"sport = :{port}"], capture_output=True,
                             text=True, timeout=10).stdout.split()
        # State Recv-Q Send-Q Local Peer: Send-Q of a listener is its backlog
        assert len(out) >= 4 and out[0] == "LISTEN", out
        cap = int(open("/proc/sys/net/core/somaxconn").read())
        assert int(out[2]) >= min(4096, cap), out
    finally:
        ctl.terminate()
        ctl.wait(timeout=20)
