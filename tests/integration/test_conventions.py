"""A habit of the conventions that a check can hold: the store reads a
result column by a name declared beside its SELECT (an enum of *_C_*
indexes), never by a bare number, except column 0 of a one-column SELECT."""
import os
import re
import subprocess

from conftest import ROOT


def test_store_reads_columns_by_name():
    files = subprocess.run(["git", "ls-files", "store/*.c"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    assert len(files) >= 10, files
    pat = re.compile(r"\b(?:sqlite3_column_\w+|store__col_\w+|s_val|s_num|s_dbl)"
                     r"\(st, ([1-9][0-9]*)\)")
    bare = []
    for f in files:
        with open(os.path.join(ROOT, f)) as fh:
            for i, line in enumerate(fh, 1):
                if pat.search(line):
                    bare.append(f"{f}:{i}: {line.strip()}")
    assert bare == [], "\n".join(bare)


# A field named state in a struct of store/store.h that is text (char
# state[16], const char *state): the rows hold the state enums and turn
# them into text only at the store's SQL and at the wire (issue 40, item 4).
TEXT_STATE = re.compile(r"\bchar\b[^;{}]*\bstate\b")
STRUCT = re.compile(r"\bstruct\b[^{;]*\{(.*?)\}", re.S)


def text_state_fields(header):
    return [m.group(0) for body in STRUCT.findall(header)
            for m in TEXT_STATE.finditer(body)]


def test_store_rows_hold_states_as_enums():
    # the check finds what it must refuse
    assert text_state_fields("typedef struct {\n long id;\n char state[16];\n} r;")
    assert text_state_fields("typedef struct {\n const char *reason, *state;\n} r;")
    assert not text_state_fields("typedef struct {\n store_trial_state state;\n} r;")
    with open(os.path.join(ROOT, "store", "store.h")) as fh:
        header = fh.read()
    assert "store_trial_state state;" in header
    assert text_state_fields(header) == []
