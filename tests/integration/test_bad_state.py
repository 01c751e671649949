"""A database whose state column holds a text that names no state (edited
by hand, or written by a newer build): the store refuses the row, every
reader says which row and which text and exits 1, and the controller keeps
serving (issue 40: rows hold the state enums, text only at the store)."""
import os
import sqlite3

from conftest import base_spec


def set_sql(jz, query, *params):
    con = sqlite3.connect(jz.db, timeout=10)
    try:
        con.execute(query, params)
        con.commit()
    finally:
        con.close()


def readers(jz, tid):
    out = os.path.join(jz.dir, "bad.svg")
    return [("study", "show", "bad"), ("trial", "list", "bad"), ("trial", "show", str(tid)),
            ("study", "export", "bad"), ("plot", "bad", "--output", out)]


def test_an_unknown_state_text_is_refused_with_its_row(jz):
    spec = base_spec("bad", ["sh", "-c", "jizhi report score=1"], trials=2, parallel=2)
    jz.run("run", jz.write_spec(spec), "--slots", "2", check=0)
    (tid,) = jz.sql("SELECT id FROM trials WHERE number=1")[0]
    for args in readers(jz, tid):  # the stored states read back
        jz.run(*args, "--db", jz.db, check=0)

    set_sql(jz, "UPDATE trials SET state='bogus' WHERE id=?", tid)
    want = f"trial {tid}: unknown state 'bogus' in the database"
    for args in readers(jz, tid):  # the database read directly
        p = jz.run(*args, "--db", jz.db, check=1)
        assert want in p.stderr, (args, p.stderr)

    # through a controller: the same words, and it keeps serving
    ctl = jz.popen("controller", "--db", jz.db)
    try:
        jz.wait_for(lambda: os.path.exists(jz.db + ".endpoint"), 20, "the endpoint file")
        with open(jz.db + ".endpoint") as f:
            ep = f.read().strip()
        for args in readers(jz, tid)[:3]:
            p = jz.run(*args, "--controller", ep, check=1)
            # the controller's words (the direct read names the file)
            assert want in p.stderr and jz.db not in p.stderr, (args, p.stderr)
        set_sql(jz, "UPDATE trials SET state='completed' WHERE id=?", tid)
        set_sql(jz, "UPDATE studies SET state='paused' WHERE name='bad'")
        p = jz.run("study", "show", "bad", "--controller", ep, check=1)
        assert "study 'bad': unknown state 'paused' in the database" in p.stderr, p.stderr
        jz.run("trial", "show", str(tid), "--controller", ep, check=0)
        assert ctl.poll() is None
    finally:
        ctl.terminate()
        ctl.wait(timeout=20)
