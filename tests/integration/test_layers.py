"""The controller's files call each other in one direction only.

controller/ctl_internal.h lists its files on floors: the loop (ctl.c) on
top, the handlers under it, the services (ctl_svc.c), the state machines
(ctl_state.c), the id map and the due heap on the ground. A file may call a file below
it, never one above, so no two files call each other, directly or round
a circle. Read from the built objects: for each controller object, the
functions it calls (nm's undefined symbols) that another controller
object defines. A circle found is named with the functions that tie it.
"""

import os
import shutil
import subprocess

import pytest

from conftest import BUILD

OBJ = os.path.join(BUILD, "obj", "controller")


def _symbols(path, flag):
    out = subprocess.run(["nm", flag, path], capture_output=True, text=True, check=True)
    names = set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if flag == "-u" and len(parts) >= 2 and parts[0] == "U":
            names.add(parts[1])
        elif flag == "--defined-only" and len(parts) == 3 and parts[1] in "TDBR":
            names.add(parts[2])
    return names


def _calls():
    """{file: {file it calls: [functions]}} among the controller's objects."""
    objs = sorted(f for f in os.listdir(OBJ) if f.endswith(".o"))
    defs = {}
    for o in objs:
        for name in _symbols(os.path.join(OBJ, o), "--defined-only"):
            defs[name] = o[:-2]
    calls = {o[:-2]: {} for o in objs}
    for o in objs:
        me = o[:-2]
        for name in _symbols(os.path.join(OBJ, o), "-u"):
            other = defs.get(name)
            if other and other != me:
                calls[me].setdefault(other, []).append(name)
    return calls


def _circle(calls):
    """One circle of files as a list (first == last), or None."""
    state = {}
    stack = []

    def visit(f):
        state[f] = 1
        stack.append(f)
        for g in sorted(calls[f]):
            if state.get(g) == 1:
                return stack[stack.index(g):] + [g]
            if g not in state:
                found = visit(g)
                if found:
                    return found
        stack.pop()
        state[f] = 2
        return None

    for f in sorted(calls):
        if f not in state:
            found = visit(f)
            if found:
                return found
    return None


def test_no_two_controller_files_call_each_other():
    if not shutil.which("nm"):
        pytest.skip("nm (binutils) is not installed")
    if not os.path.isdir(OBJ):
        pytest.skip(f"no controller objects under {OBJ}: build first (make all)")
    calls = _calls()
    assert "ctl" in calls and "ctl_msg" in calls, sorted(calls)
    circle = _circle(calls)
    if circle:
        ties = "; ".join(
            f"{a}.c -> {b}.c: {', '.join(sorted(calls[a][b]))}"
            for a, b in zip(circle, circle[1:])
        )
        pytest.fail("controller files call each other round a circle: " + ties)
    # the loop is on top: nothing calls ctl.c; the ground calls no handler
    assert not [f for f in calls if "ctl" in calls[f]]
    ground = {"ctl_svc", "ctl_state", "ctl_idmap", "ctl_due"}
    assert ground <= set(calls), sorted(calls)
    for f in ground:
        assert set(calls[f]) <= ground, (f, calls[f])
