"""psync_launch --worker_cmd with real processes: two servers and two torch
workers (tests/torch_launch_worker.py) train the weights a run by hand
gives, bit for bit in deterministic mode; a torch worker killed with
SIGKILL mid-step (when it says it paused there, never after a delay) is
restarted and the job ends with the undisturbed run's weights, as it does
when a server is killed mid-step and the workers roll back; an empty
--worker_cmd and one that does not exist are refused naming it. The
launcher is started without PYTHONPATH: it must add the package itself.
Run by run_python_test.sh; every run is bounded by --timeout_s and a wait."""

import os
import re
import shlex
import signal
import subprocess
import sys
import unittest
from typing import Dict, List, Optional, Tuple

import torch

from psync_servers import BOUND_S, Servers, wait_all

JOB = ["--num_workers=2", "--batch_per_device=8", "--devices=1", "--steps=12", "--lr=0.1",
       "--momentum=0.9", "--weight_decay=0.01", "--deterministic", "--seed=7",
       "--pull_timeout_s=60", "--rpc_timeout_s=60", "--connect_timeout_s=30",
       "--peer_timeout_s=60", "--chunk_kb=1",
       "--overlap_min_kb=0"]  # each parameter's push starts in backward: a pause is mid-push
RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ""), "psync")
LAUNCH = os.path.join(RUNFILES, "deploy/local/psync_launch")
WORKER = os.path.join(RUNFILES, "tests/torch_launch_worker.py")
TMP = os.environ.get("TEST_TMPDIR", "/tmp")
RUN_LIMIT_S = 150  # --timeout_s=120, plus shutdown


def worker_cmd(*own_flags: str) -> str:
    return " ".join(shlex.quote(a) for a in [sys.executable, WORKER] + list(own_flags))


def launcher_env() -> Dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # psync_launch finds the package itself
    return env


def start_launch(flags: List[str]) -> subprocess.Popen:
    return subprocess.Popen([LAUNCH, "--num_servers=2", "--timeout_s=120"] + JOB + flags,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=launcher_env())


def finish(launch: subprocess.Popen, seen: str = "") -> Tuple[int, str]:
    try:
        rest, _ = launch.communicate(timeout=RUN_LIMIT_S)
    except subprocess.TimeoutExpired:
        launch.kill()
        rest, _ = launch.communicate()
        return -1, seen + rest
    return launch.returncode, seen + rest


def read_until(launch: subprocess.Popen, line_part: str) -> Optional[str]:
    """What the launcher printed up to and including the first line with
    `line_part`; None if it ended first (it is bounded by --timeout_s)."""
    seen = []
    for line in launch.stdout:
        seen.append(line)
        if line_part in line:
            return "".join(seen)
    return None


def load(path: str) -> Dict[str, torch.Tensor]:
    return torch.load(path)


class TorchLaunchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        """The job run by hand: two servers, then one script per worker."""
        out = os.path.join(TMP, "by_hand.pt")
        with Servers(JOB, count=2) as servers:
            workers = [subprocess.Popen([sys.executable, WORKER, f"--out={out}", servers.flag] +
                                        JOB + [f"--worker_rank={r}"]) for r in range(2)]
            codes = wait_all(workers)  # kills one still running past its bound
        assert codes == [0, 0], f"workers by hand exited with {codes}"
        cls.by_hand = load(out)

    def assert_by_hands_weights(self, path: str) -> None:
        got = load(path)
        self.assertEqual(list(got), list(self.by_hand))
        for name, want in self.by_hand.items():
            self.assertTrue(torch.equal(got[name], want), f"{name}: {got[name]} != {want}")

    def test_launched_torch_workers_train_as_a_run_by_hand(self):
        out = os.path.join(TMP, "launched.pt")
        code, output = finish(start_launch([f"--worker_cmd={worker_cmd('--out=' + out)}"]))
        self.assertEqual(code, 0, output)
        self.assertIn("[launch] workers run --worker_cmd", output)
        self.assertIn("PYTHONPATH starts with", output)
        for r in range(2):
            self.assertIn(f"[worker {r}] worker {r} trained 12 steps", output)
        self.assertIn("(0 restarts)", output)
        self.assert_by_hands_weights(out)

    def launch_paused(self, name: str, step: int, flags: List[str]) -> Tuple[subprocess.Popen, str]:
        """psync_launch (--pid_dir=TMP/NAME_pids, `flags`) with worker 1 told to pause
        inside `step` (marker TMP/NAME_paused), once it says it has; and what it
        printed up to then. Worker 0 writes its weights to TMP/NAME.pt."""
        marker = os.path.join(TMP, name + "_paused")
        for path in (marker, marker + ".go"):
            if os.path.exists(path):
                os.remove(path)
        cmd = worker_cmd(f"--out={os.path.join(TMP, name + '.pt')}", "--pause_worker=1",
                         f"--pause_at_step={step}", "--pause_marker=" + marker)
        launch = start_launch([f"--worker_cmd={cmd}", f"--pid_dir={os.path.join(TMP, name)}_pids",
                               "--max_restarts=2"] + flags)
        seen = read_until(launch, f"[worker 1] paused at step {step}")
        if seen is None:
            code, output = finish(launch)
            self.fail(f"worker 1 did not pause (exit code {code}):\n{output}")
        return launch, seen

    def test_a_killed_torch_worker_is_restarted_and_the_weights_do_not_change(self):
        launch, seen = self.launch_paused("restarted", 5, [])
        pid_dir = os.path.join(TMP, "restarted_pids")
        with open(os.path.join(pid_dir, "worker-1.pid")) as f:
            group = int(f.read())  # the shell's pid, and its process group
        os.killpg(group, signal.SIGKILL)  # the shell and the script: the whole worker
        code, output = finish(launch, seen)
        self.assertEqual(code, 0, output)
        self.assertIn("[launch] worker 1 exited with code 137 (killed by SIGKILL); restarting it "
                      "(restart 1 of 2)", output)
        self.assertEqual(output.count("[worker 1] worker 1 resumes from step"), 2, output)
        self.assertIn("(1 restart)", output)
        self.assert_by_hands_weights(os.path.join(TMP, "restarted.pt"))

    def test_a_killed_server_rolls_the_torch_workers_back_and_the_weights_do_not_change(self):
        launch, seen = self.launch_paused(
            "rolled_back", 8, [f"--checkpoint_dir={os.path.join(TMP, 'ckpt')}",
                               "--checkpoint_every=3"])
        # Server 1 dies with step 8's pushes started; it restarts from the newest
        # checkpoint every server has written (9 at most; checkpoints are written in
        # the background), and both workers, told ABORTED, recover() and train again
        # from there.
        with open(os.path.join(TMP, "rolled_back_pids", "server-1.pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        open(os.path.join(TMP, "rolled_back_paused.go"), "w").close()
        code, output = finish(launch, seen)
        self.assertEqual(code, 0, output)
        self.assertIn("[launch] server 1 exited with code 137 (killed by SIGKILL); restarting it",
                      output)
        resumed = [re.findall(rf"\[worker {r}\] the servers rolled back: resuming from step "
                              r"(\d+)", output) for r in range(2)]
        self.assertEqual(resumed[0], resumed[1], output)
        self.assertIn(resumed[0], [["0"], ["3"], ["6"], ["9"]], output)
        self.assertIn("(1 restart)", output)  # the server's; no worker was restarted
        self.assertNotIn("[launch] worker", output.split("[launch] server 1 exited")[1])
        self.assert_by_hands_weights(os.path.join(TMP, "rolled_back.pt"))

    def test_a_bad_worker_cmd_is_refused_naming_it(self):
        code, output = finish(start_launch(["--worker_cmd="]))
        self.assertEqual(code, 2, output)
        self.assertIn("[launch] bad configuration: --worker_cmd is '', expected a command", output)
        self.assertNotIn("[server 0]", output)
        code, output = finish(start_launch(["--worker_cmd=no_such_psync_script --x=1"]))
        self.assertEqual(code, 2, output)
        self.assertIn("exited with code 127: its --worker_cmd 'no_such_psync_script --x=1' was "
                      "not found by /bin/sh (never restarted)", output)
        # The shell's own words, as dash ("not found") or bash ("command not found") says them.
        self.assertRegex(output, r"no_such_psync_script: (command )?not found")
        self.assertNotIn("restarting it", output)


if __name__ == "__main__":
    unittest.main()
