"""`jizhi watch`: the ncurses view driven through tmux (a private server
per test: send-keys, capture-pane) on a study run by the daemons — it
shows the running trial, sets a parameter and stops the selected trial
after a y/n confirmation, and quits on q; without a terminal it prints
plain lines and exits when the study ends."""
import os
import re
import shlex
import subprocess
import uuid

from conftest import JIZHI
from test_control import daemons, live_spec, running_trial
from test_recovery import stop


class Tmux:
    """One private tmux server (-L) running one command in a 160x40 pane."""

    def __init__(self, jz, command):
        self.jz = jz
        self.sock = "jzw-" + uuid.uuid4().hex[:12]
        env = dict(jz.env, LANG="C.UTF-8", LC_ALL="C.UTF-8")
        env.pop("TMUX", None)
        self.env = env
        self.tmux("new-session", "-d", "-x", "160", "-y", "40", "-c", jz.dir,
                  " ".join(shlex.quote(a) for a in command))

    def tmux(self, *args, check=True):
        return subprocess.run(["tmux", "-L", self.sock, *args], env=self.env, capture_output=True,
                              text=True, timeout=30, check=check)

    def screen(self):
        return self.tmux("capture-pane", "-p").stdout

    def keys(self, *keys):
        self.tmux("send-keys", *keys)

    def wait_screen(self, pattern, what, timeout=30):
        found = []

        def match():
            m = re.search(pattern, self.screen(), re.M)
            if m:
                found.append(m)
            return m is not None

        try:
            self.jz.wait_for(match, timeout, what)
        except AssertionError:
            raise AssertionError(f"timed out waiting for {what}; screen:\n{self.screen()}")
        return found[-1]

    def alive(self):
        return self.tmux("has-session", check=False).returncode == 0

    def close(self):
        self.tmux("kill-server", check=False)


def test_watch_shows_the_running_trial_sets_and_stops_it_by_key(jz):
    ep, ctl, disp = daemons(jz)
    tm = None
    try:
        jz.run("study", "submit", jz.write_spec(live_spec("watched", steps="4000")), check=0)
        tid = running_trial(jz)
        tm = Tmux(jz, [JIZHI, "watch", "watched", "--db", jz.db, "--interval", "0.2"])
        # the table shows the trial (selected: the first running one) with its step
        tm.wait_screen(rf"^>{tid}\s+running\s+\d+", "the running trial in the table")
        screen = tm.screen()
        assert "watched" in screen.splitlines()[0] and "running 1" in screen
        assert re.search(r"\bscore\b", screen) and "lr=" in screen

        # e: set lr=0.5 after confirmation; the acknowledgement lands in the status line
        tm.keys("e")
        tm.wait_screen(r"KEY=VALUE\.\.\. \(Enter to send", "the KEY=VALUE prompt")
        tm.keys("lr=0.05", "Enter")
        tm.wait_screen(rf"set lr=0\.05 on trial {tid}\? \(y/n\)", "the confirmation question")
        tm.keys("y")
        tm.wait_screen(rf"trial {tid}: set lr=0\.05 acknowledged in [0-9.]+ ms", "the acknowledgement")
        jz.wait_for(lambda: jz.sql("SELECT value FROM metrics WHERE trial_id=? AND name='lr' "
                                   "ORDER BY rowid DESC LIMIT 1", tid)[0][0] == 0.05, 30,
                    "the new lr in the trial's reports")

        # a key the program does not accept: the refusal lands in the status line
        tm.keys("e")
        tm.wait_screen(r"KEY=VALUE\.\.\. \(Enter to send", "the KEY=VALUE prompt")
        tm.keys("colour=5", "Enter")
        tm.wait_screen(rf"set colour=5 on trial {tid}\? \(y/n\)", "the confirmation question")
        tm.keys("y")
        tm.wait_screen(rf"trial {tid}: set colour=5 failed: .*unknown parameter colour",
                       "the refusal")

        # p then y pauses: acknowledged, shown as paused; r then y resumes
        tm.keys("p")
        tm.wait_screen(rf"pause trial {tid}\? \(y/n\)", "the pause question")
        tm.keys("y")
        tm.wait_screen(rf"^>{tid}\s+paused", "the paused state in the table")
        tm.wait_screen(rf"trial {tid}: pause acknowledged", "the pause acknowledgement")
        tm.keys("r")
        tm.wait_screen(rf"resume trial {tid}\? \(y/n\)", "the resume question")
        tm.keys("y")
        tm.wait_screen(rf"trial {tid}: resume acknowledged", "the resume acknowledgement")
        tm.wait_screen(rf"^>{tid}\s+running", "the running state again")

        # the view follows the terminal's size
        tm.tmux("resize-window", "-x", "100", "-y", "16")
        tm.wait_screen(r"q quit\s*\Z", "the key line at the bottom of the smaller window")
        assert len(tm.screen().splitlines()) <= 16
        tm.wait_screen(rf"^>{tid}\s+running", "the trial in the smaller window")

        # s then n cancels: nothing is sent
        tm.keys("s")
        tm.wait_screen(rf"stop trial {tid}\? \(y/n\)", "the stop question")
        tm.keys("n")
        tm.wait_screen(r"^cancelled", "the cancellation")
        assert jz.sql("SELECT state FROM trials WHERE id=?", tid)[0][0] == "running"

        # s then y stops the selected trial
        tm.keys("s")
        tm.wait_screen(rf"stop trial {tid}\? \(y/n\)", "the stop question")
        tm.keys("y")
        jz.wait_for(lambda: jz.sql("SELECT state FROM trials WHERE id=?", tid)[0][0] == "stopped",
                    30, "the trial to stop")
        tm.wait_screen(rf"^>{tid}\s+stopped", "the stopped state in the table")
        ev = jz.sql("SELECT who, kind FROM events WHERE trial_id=? AND kind='instruction'", tid)
        assert ("cli", "instruction") in ev

        # q quits
        tm.keys("q")
        jz.wait_for(lambda: not tm.alive(), 10, "watch to quit")
    finally:
        if tm:
            tm.close()
        stop(ctl, disp)


def test_watch_without_a_terminal_prints_lines_and_exits_when_the_study_ends(jz):
    ep, ctl, disp = daemons(jz)
    try:
        jz.run("study", "submit", jz.write_spec(live_spec("plain", trials=2, parallel=2, steps="20")),
               check=0)
        p = jz.run("watch", "plain", "--db", jz.db, "--interval", "0.1", timeout=90, check=0)
        lines = p.stdout.splitlines()
        assert lines, p.stderr
        assert not any("\x1b" in line for line in lines), "terminal escapes in plain output"
        ids = [i for (i,) in jz.sql("SELECT id FROM trials ORDER BY number")]
        for tid in ids:
            assert any(re.match(rf"trial {tid} completed step \d+ score=", line)
                       for line in lines), lines
        study = [line for line in lines if line.startswith("study plain ")]
        assert study and "finished" in study[-1] and "done 2/2" in study[-1], study
        assert "best score" in study[-1]
        assert len(study) == len(set(s.rsplit(", elapsed", 1)[0] for s in study)), \
            "a status line repeated without a change"
    finally:
        stop(ctl, disp)


def test_watch_errors(jz):
    p = jz.run("watch", check=2)
    assert "expected STUDY" in p.stderr
    p = jz.run("watch", "x", "--interval", "0", check=2)
    assert "--interval" in p.stderr
    p = jz.run("watch", "nope", "--db", os.path.join(jz.dir, "missing.db"), check=1)
    assert "cannot read database" in p.stderr
    assert jz.run("watch", "--help", check=0).stdout.startswith("usage: jizhi watch")


def test_watch_sorts_and_keeps_params_at_80_columns(jz):
    from conftest import base_spec

    spec = base_spec("sorted", ["sh", "-c", "jizhi report score={x}"], trials=4, parallel=2)
    jz.run("run", jz.write_spec(spec), check=0)
    rows = jz.sql("SELECT id, value FROM trials")
    best = max(rows, key=lambda r: r[1])[0]
    tm = Tmux(jz, [JIZHI, "watch", "sorted", "--db", jz.db, "--interval", "0.2"])
    try:
        tm.tmux("resize-window", "-x", "80", "-y", "24")
        tm.wait_screen(r"PARAMS", "the params header at 80 columns")
        screen = tm.screen()
        assert all(len(l) <= 80 for l in screen.splitlines())
        assert len(re.findall(r"^.\d+\s+completed.*x=", screen, re.M)) == 4, screen
        tm.keys("o")
        tm.wait_screen(r"sorted by objective", "the sort status")
        first = [l for l in tm.screen().splitlines() if re.match(r"^.\d+\s+completed", l)][0]
        assert int(first[1:].split()[0]) == best, tm.screen()
        tm.keys("q")
    finally:
        tm.close()
