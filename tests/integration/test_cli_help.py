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


# (command, an option it takes with a value, a bad value for it or None,
#  the positional arguments that go with the bad value)
OPTION_CASES = [
    (["keygen"], "--name", ".hidden", []),
    (["plot"], "--x", "", ["S"]),
    (["serve"], "--http", None, []),
    (["token"], "--role", None, []),
    (["report"], "--step", "1.5", ["y=1"]),
    (["watch"], "--interval", "0.001", ["S"]),
    (["run"], "--slots", "0", ["spec.json"]),
    (["controller"], "--lost-timeout", "-1", []),
    (["dispatcher"], "--poll-s", "0.001", []),
]


def test_commands_share_one_option_parser(tmp_path):
    """Every command parses through cli_opts_parse: --help prints its usage
    (exit 0), an unknown option or a missing value is a usage error (exit 2)
    with the usage, a bad value names the option, and the shared options a
    command does not take are refused (keygen has no --db)."""
    env = dict(os.environ, JIZHI_DB=str(tmp_path / "none.db"), JIZHI_HOME=str(tmp_path))

    def run(*args):
        return subprocess.run([JIZHI, *args], capture_output=True, text=True, timeout=30,
                              env=env, stdin=subprocess.DEVNULL)

    for cmd, opt, bad, pos in OPTION_CASES:
        p = run(*cmd, "--help")
        assert p.returncode == 0 and p.stdout.startswith("usage: jizhi " + cmd[0]), (cmd, p)
        p = run(*cmd, "--no-such-option")
        assert p.returncode == 2 and "usage: jizhi " + cmd[0] in p.stderr, (cmd, p)
        p = run(*cmd, opt)
        assert p.returncode == 2 and "usage:" in p.stderr, (cmd, opt, p)
        if bad is not None:
            p = run(*cmd, opt, bad, *pos)
            assert p.returncode == 2 and opt in p.stderr + p.stdout, (cmd, opt, bad, p)
    p = run("keygen", "--db", str(tmp_path / "x.db"))
    assert p.returncode == 2, p
    assert not os.path.exists(tmp_path / "client.key")
    # the dispatcher's Slurm-only options name themselves without --backend slurm,
    # and --slots with its Slurm name --max-jobs is refused
    p = run("dispatcher", "--controller", "ipc:///nonexistent", "--account", "a")
    assert p.returncode == 2 and "--account needs --backend slurm" in p.stderr, p
    p = run("dispatcher", "--controller", "ipc:///nonexistent", "--backend", "slurm",
            "--slots", "2", "--max-jobs", "3")
    assert p.returncode == 2 and "--slots and --max-jobs" in p.stderr, p
    assert not os.path.exists(tmp_path / "none.db")


def test_no_command_writes_its_own_getopt_loop():
    """cli/cli_opts.c is the one place in cli/ that calls getopt_long."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    callers = subprocess.run(["git", "grep", "-l", "getopt_long(", "--", "cli/"], cwd=root,
                             capture_output=True, text=True).stdout.split()
    assert callers == ["cli/cli_opts.c"], callers
