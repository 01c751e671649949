"""`jizhi --help` lists every subcommand that the commands' own --help
pages offer (it once left out study enqueue, extend and importance)."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import JIZHI  # noqa: E402


def help_of(*args):
    p = subprocess.run([JIZHI, *args, "--help"], capture_output=True, text=True, timeout=30)
    return p.stdout + p.stderr


def top_section(top, cmd):
    """The lines of `jizhi --help` about `cmd`: its own line and the
    continuation lines (starting with '|') after it."""
    lines = top.splitlines()
    out = []
    for i, l in enumerate(lines):
        if re.match(r"  %s\b" % cmd, l):
            out.append(l)
            for m in lines[i + 1:]:
                if not m.strip().startswith("|"):
                    break
                out.append(m)
    return " ".join(out)


def test_top_help_lists_every_subcommand():
    top = help_of()
    for cmd in ("study", "trial", "token", "quota", "dispatcher"):
        page = help_of(cmd)
        subs = set()
        for line in page.splitlines():
            if not re.search(r"jizhi %s " % cmd, line):
                continue
            subs.update(re.findall(r"(?:jizhi %s |\| )([a-z][a-z-]+)\b" % cmd, line))
        subs.discard("backend")  # an option's value, not a subcommand
        assert subs, "no subcommands found in `jizhi %s --help`" % cmd
        section = top_section(top, cmd)
        missing = [s for s in sorted(subs) if not re.search(r"\b%s\b" % s, section)]
        assert not missing, "`jizhi --help` omits %s %s" % (cmd, missing)
