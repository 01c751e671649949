"""A command the user got wrong says so in jizhi's words, with exit 2 for
a usage error and 1 for a failure, and leaves the file system as it was
(review35 items 5, 8, 10c, 10d, 10e): --http, --db and --gpus are checked
before a database, a log folder or a run directory is made; getopt's
refusals read as the other messages; a folder given as the spec and a
file that is no database are named."""
import os

from conftest import base_spec


def listing(path):
    """Every path under `path`, to compare before and after a command."""
    out = set()
    for root, dirs, files in os.walk(path):
        out.update(os.path.join(root, n) for n in dirs + files)
    return out


def test_a_refused_run_or_daemon_creates_nothing(jz):
    spec = jz.write_spec(base_spec("nothing", ["true"], trials=1))
    notdb = os.path.join(jz.dir, "sub", "notes.txt")
    os.mkdir(os.path.dirname(notdb))
    with open(notdb, "w") as f:
        f.write("not a database\n")
    before = listing(jz.dir)
    cases = [
        # (arguments, exit status, what stderr says)
        (["run", spec, "--http", "127.0.0.1:99999"], 2, '--http: "99999" is not a port'),
        (["run", spec, "--http", "nonsense"], 2, '--http: expected HOST:PORT, got "nonsense"'),
        (["controller", "--db", "c.db", "--http", "nonsense"], 2, "--http: expected HOST:PORT"),
        (["serve", "--http", "127.0.0.1:99999"], 2, '--http: "99999" is not a port'),
        (["dispatcher", "--controller", "ipc:///nonexistent", "--gpus", "abc"], 2,
         '--gpus "abc": expected a comma-separated list'),
        # the database is opened before the log folder beside it is made
        (["run", spec, "--db", notdb], 1, f"cannot use {notdb} as a database"),
        (["controller", "--db", notdb, "--log", os.path.join(jz.dir, "sub", "c.log")], 1,
         f"cannot use {notdb} as a database"),
    ]
    # a folder that does not exist: neither run nor controller makes it
    missing = os.path.join(jz.dir, "no", "such")
    for cmd in (["run", spec], ["controller"]):
        cases.append((cmd + ["--db", os.path.join(missing, "x.db")], 1,
                      f"its folder {missing} does not exist"))
    for args, rc, says in cases:
        p = jz.run(*args, timeout=60)
        assert p.returncode == rc and says in p.stderr, (args, p.returncode, p.stderr)
        assert listing(jz.dir) == before, (args, listing(jz.dir) - before)


def test_a_run_or_daemon_failing_late_leaves_nothing(jz):
    """What run and controller made before a later failure (a log folder it
    cannot make, a port in use, a spec its controller refuses) is removed
    again: the database it created, its log folder and log file, its socket
    (review36 item 2: ./jizhi.db was left behind)."""
    import socket
    spec = jz.write_spec(base_spec("late", ["true"], trials=1))
    warm = jz.write_spec(dict(base_spec("warm", ["true"], trials=1),
                              warm_start={"from": ["nosuch"]}), "warm.json")
    jz.env.pop("JIZHI_LOG", None)  # the run's log file is made too
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    port = held.getsockname()[1]
    before = listing(jz.dir)
    try:
        cases = [
            (["run", spec, "--log-dir", "/proc/nope/logs"],
             "cannot make the log folder /proc/nope/logs"),
            (["run", spec, "--log-dir", os.path.join(jz.dir, "a", "b"), "--http",
              f"127.0.0.1:{port}"], f"cannot listen on 127.0.0.1:{port}"),
            (["run", spec, "--http", f"127.0.0.1:{port}"], "cannot listen on"),
            # refused by its controller: a study to warm-start from that is not there
            (["run", warm], 'warm_start.from[0]: no study named "nosuch"'),
            (["controller", "--log", os.path.join(jz.dir, "c.log"), "--bind",
              f"ipc://{jz.dir}/c.sock", "--http", f"127.0.0.1:{port}"], "cannot listen on"),
            (["controller", "--bind", f"tcp://127.0.0.1:{port}", "--insecure"],
             "Address already in use"),
        ]
        for args, says in cases:
            p = jz.run(*args, timeout=60)
            assert p.returncode == 1 and says in p.stderr, (args, p.returncode, p.stderr)
            assert listing(jz.dir) == before, (args, listing(jz.dir) - before)
    finally:
        held.close()


def test_a_late_failure_leaves_a_symlink_it_was_given(jz):
    """A dangling symlink given as --db or --log is not what the command
    made (SQLite and the log open the file it points to): a late failure
    leaves the link, and removes only the files it made itself (review38
    item 1: the link was unlinked as if the command had made it)."""
    import socket
    spec = jz.write_spec(base_spec("links", ["true"], trials=1))
    jz.env.pop("JIZHI_LOG", None)
    data = os.path.join(jz.dir, "data")
    os.mkdir(data)
    dblink, loglink = os.path.join(jz.dir, "link.db"), os.path.join(jz.dir, "c.log")
    os.symlink(os.path.join(data, "target.db"), dblink)
    os.symlink(os.path.join(data, "c.log"), loglink)
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    port = held.getsockname()[1]
    try:
        cases = [(["run", spec, "--db", dblink, "--http", f"127.0.0.1:{port}"], dblink),
                 (["controller", "--db", os.path.join(jz.dir, "new.db"), "--log", loglink,
                   "--bind", f"ipc://{jz.dir}/c.sock", "--http", f"127.0.0.1:{port}"],
                  loglink)]
        for args, link in cases:
            p = jz.run(*args, timeout=60)
            assert p.returncode == 1 and "cannot listen on" in p.stderr, (args, p.stderr)
            assert os.path.islink(link), (args, sorted(os.listdir(jz.dir)))
        # what they made themselves is gone: the new database, the run's log folder
        for made in ("new.db", "new.db-wal", "new.db-shm", "jizhi-logs", "c.sock"):
            assert not os.path.exists(os.path.join(jz.dir, made)), made
    finally:
        held.close()


def test_option_errors_read_as_jizhis_own(jz):
    """getopt's refusals come as "jizhi: COMMAND: ...", exit 2, with the
    usage; none in getopt's own words ("list: unrecognized option")."""
    cases = [(["study", "list", "--bogus"], 'jizhi: list: unknown option "--bogus"'),
             (["study", "list", "--db"], "jizhi: list: --db needs a value"),
             (["study", "list", "--json=yes"], "jizhi: list: --json takes no value"),
             (["controller", "--lo", "x"], 'jizhi: controller: ambiguous option "--lo"'),
             (["trial", "tell", "-0"], 'jizhi: tell: unknown option "-0"'),  # the front
             (["plot", "s", "-o"], "jizhi: plot: -o needs a value")]
    for args, says in cases:
        p = jz.run(*args)
        assert p.returncode == 2, (args, p.stderr)
        first = p.stderr.splitlines()[0]
        assert first == says, (args, p.stderr)
        assert "usage: jizhi" in p.stderr, (args, p.stderr)


def test_a_folder_as_spec_and_a_file_as_database_are_named(jz):
    p = jz.run("run", jz.dir)
    assert p.returncode == 1, p.stderr
    assert p.stderr.strip() == f"jizhi: {jz.dir}: a folder, not a spec file (SPEC.json)"
    notdb = os.path.join(jz.dir, "hostname")
    with open(notdb, "w") as f:
        f.write("myhost\n")
    p = jz.run("study", "list", "--db", notdb)
    assert p.returncode == 1 and f"cannot use {notdb} as a database" in p.stderr, p.stderr


def test_running_a_finished_study_again_says_only_that(jz):
    """The study is not loaded in the new run's controller: nothing asks
    it about the study, so no "no study named ..." line."""
    spec = jz.write_spec(base_spec("done", ["sh", "-c", "jizhi report score=1"], trials=1))
    jz.run("run", spec, check=0)
    p = jz.run("run", spec, check=0)
    assert "study done already finished" in p.stderr, p.stderr
    assert "no study named" not in p.stderr, p.stderr
    assert "best trial 1: score=1" in p.stdout, p.stdout
