"""Runs one of mpi4py's test modules on this rank and records the outcome.

Used by scripts/clients.sh, once per rank under a launcher:

    python scripts/mpi4py_run.py TESTDIR OUTPREFIX MODULE [main.py options...]

TESTDIR is mpi4py's test/ directory (its main.py drives the run, with the
given options, such as -x patterns that exclude test cases); the outcome of
this rank goes to OUTPREFIX.<rank>.json: tests run, the ids of failed and
erroring tests, the number skipped. The exit status is main.py's (non-zero
if a test failed on this rank).
"""

import json
import os
import sys


def main():
    testdir, outprefix, module, *options = sys.argv[1:]
    sys.path.insert(0, testdir)
    sys.dont_write_bytecode = True
    import main as mpi4py_main  # mpi4py's test/main.py

    class Program(mpi4py_main.TestProgram):
        def runTests(self):
            code = 0
            try:
                super().runTests()
            except SystemExit as exc:
                code = exc.code
            from mpi4py import MPI

            rank = MPI.COMM_WORLD.Get_rank()
            res = self.result
            out = {
                "rank": rank,
                "run": res.testsRun,
                "failures": sorted(t.id() for t, _ in res.failures),
                "errors": sorted(t.id() for t, _ in res.errors),
                "unexpected_successes": sorted(t.id() for t in res.unexpectedSuccesses),
                "skipped": len(res.skipped),
            }
            path = f"{outprefix}.{rank}.json"
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(out, f)
            os.replace(path + ".tmp", path)
            sys.exit(code)

    argv = [os.path.join(testdir, "main.py"), "--no-builddir", *options]
    argv += ["-i", "^" + module.replace(".", r"\.") + r"\.py$"]
    Program(module=None, argv=argv)


if __name__ == "__main__":
    main()
