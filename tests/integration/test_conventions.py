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
