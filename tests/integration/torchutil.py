"""What the PyTorch tests share (test_torch_helper, test_torch_launch,
test_torch_sync): Debian's python3 that has python3-torch, the example's
folder, the Fashion-MNIST file, the skip markers that say which of them
this machine lacks, the daemons their trials run under and the JSON lines
their trials log."""
import json
import os
import subprocess

import pytest

from conftest import ROOT
from test_recovery import start_controller, start_dispatcher

PY = "/usr/bin/python3"
EXAMPLE = os.path.join(ROOT, "examples", "torch")
FMNIST = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"


def has_torch(module="torch"):
    """Whether PY imports `module` ("torch", or "torch.distributed" for the
    DDP tests)."""
    try:
        return subprocess.run([PY, "-c", "import " + module], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def needs_torch(module="torch"):
    """A skip marker for a machine whose PY cannot import `module`."""
    return pytest.mark.skipif(not has_torch(module),
                              reason="%s has no torch (python3-torch)" % PY)


def needs_fmnist():
    """A skip marker for a machine without the Fashion-MNIST training images."""
    return pytest.mark.skipif(not os.path.exists(FMNIST),
                              reason="Fashion-MNIST missing (Debian's dataset-fashion-mnist)")


def daemons(jz, slots=2):
    """A controller on a socket in the test's folder and a dispatcher with
    `slots` slots: (controller, dispatcher), for test_recovery.stop."""
    ep = f"ipc://{jz.dir}/ctl.sock"
    ctl = start_controller(jz, ep)
    return ctl, start_dispatcher(jz, ep, slots)


def records(path):
    """The complete JSON lines a trial wrote to `path` so far ([] before the
    file exists)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]
