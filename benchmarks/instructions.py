"""Instructions per warm job, counted by valgrind: the driver's, and its task processes'.

    python -m benchmarks.instructions [--jobs 200] [--tree PATH ...]
    python -m benchmarks.instructions --shuffle 2000 --jobs 1   # a 2,000 x 2,000 shuffle

Why: a warm job costs a few hundred microseconds, and on this shared 2-core VM the same
tree's median latency moves by 20-30 % from one run to the next, so a change that saves 5 %
of the driver's work cannot be seen in wall time. Instructions executed in user space do not
depend on the neighbours: each tree runs the same program twice under
`valgrind --tool=cachegrind --cache-sim=no --trace-children=yes` (20 warm-up jobs, then 0 or
N more `parallelize(range(100), 2).count()` on local[2], UI off), and the difference of
each process's count, divided by N, is what one job costs it. Kernel work (system calls,
wake-ups) is not counted: it shows in the latency benchmarks, not here. Several --tree
values (source checkouts) are measured in turn, so two versions compare in one run. Needs
valgrind (`apt-get install valgrind`); prints one line per tree and a JSON line each.
With --shuffle P the job is instead the partitions benchmark's P x P shuffle of 100,000
small pairs (benchmarks/shuffle_partitions.py), whose 2P tasks are each a map task writing
a few records into P partitions or a reduce task reading them from ~100,000 / P segments.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

WARM_UP = 20

_PROGRAM = """
import os, sys
sys.path.insert(0, {benchmarks!r})
import shuffle_partitions
from ember import SparkConf, SparkContext
sc = SparkContext(conf=SparkConf().setMaster("local[2]").set("spark.ui.enabled", "false"))
for i in range({warm_up} + int(sys.argv[1])):
    if {shuffle} and i >= {warm_up}:
        shuffle_partitions.shuffle(sc, {shuffle})
    else:
        sc.parallelize(range(100), 2).count()
sc.stop()
print("driver pid", os.getpid(), flush=True)
"""

_REFS = re.compile(r"^==(\d+)== I\s+refs:\s+([\d,]+)", re.M)


def count(tree: str, jobs: int, shuffle: int = 0) -> dict[str, int]:
    """{'driver': Ir, 'others': Ir of its task processes and fork server summed,
    'processes': n} of one run."""
    with tempfile.TemporaryDirectory() as tmp:
        program = os.path.join(tmp, "warm_jobs.py")
        with open(program, "w") as f:
            f.write(_PROGRAM.format(warm_up=WARM_UP, shuffle=shuffle,
                                    benchmarks=os.path.join(tree, "benchmarks")))
        # run from the temporary directory: the task processes start with `python -m`,
        # which puts the working directory first on their path, so from inside another
        # checkout they would import its ember whatever PYTHONPATH says
        env = dict(os.environ, PYTHONPATH=tree)
        run = subprocess.run(
            ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--trace-children=yes",
             "--cachegrind-out-file=/dev/null", sys.executable, program, str(jobs)],
            env=env, cwd=tmp, capture_output=True, text=True, timeout=900)
    found = re.search(r"driver pid (\d+)", run.stdout)
    if run.returncode != 0 or found is None:
        raise RuntimeError(f"the program failed under valgrind:\n{run.stderr[-2000:]}")
    refs = {int(pid): int(n.replace(",", "")) for pid, n in _REFS.findall(run.stderr)}
    driver = refs.pop(int(found.group(1)))
    return {"driver": driver, "others": sum(refs.values()), "processes": len(refs) + 1}


def per_job(tree: str, jobs: int, shuffle: int = 0) -> dict[str, object]:
    base, more = count(tree, 0, shuffle), count(tree, jobs, shuffle)
    return {"tree": tree, "jobs": jobs, "shuffle": shuffle,
            "driver_per_job": round((more["driver"] - base["driver"]) / jobs),
            "task_processes_per_job": round((more["others"] - base["others"]) / jobs),
            "processes": more["processes"]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--shuffle", type=int, default=0, metavar="P",
                   help="count a P x P shuffle job instead of the warm job")
    p.add_argument("--tree", action="append", default=None,
                   help="an Ember source tree to measure (default: this one); repeatable")
    args = p.parse_args(argv)
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    trees = args.tree or [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    for tree in trees:
        r = per_job(os.path.abspath(tree), args.jobs, args.shuffle)
        print(f"{r['tree']}: driver {r['driver_per_job']:,} instructions per job, task "
              f"processes {r['task_processes_per_job']:,} ({r['processes']} processes)")
        workload = "shuffle_job_instructions" if args.shuffle else "warm_job_instructions"
        print(json.dumps({"workload": workload, **r}))


if __name__ == "__main__":
    main()
