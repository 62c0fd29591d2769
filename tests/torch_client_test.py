"""psync.torch.Client against a real psync_server: layout, pulls, push-pulls
checked against SGD computed here (exactly), errors, GIL release, the
import check and the installed package. Run by run_python_test.sh with the interpreter psync was built
for; bounds its own time and stops its server."""

import os
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

import torch

import psync
import psync.torch as pt
from psync_servers import free_port

RUNFILES = os.path.join(os.environ["TEST_SRCDIR"], "psync")
TMP = os.environ["TEST_TMPDIR"]
LAYOUT = [("fc.weight", (40, 20)), ("fc.bias", (40,))]
LR = 0.25  # a power of two, like the sample counts: the update rounds once, as here
JOB = ["--lr=0.25", "--momentum=0", "--chunk_kb=1", "--num_workers=1", "--pull_timeout_s=60",
       "--rpc_timeout_s=60", "--connect_timeout_s=30"]
BOUND_S = 60  # the longest this test waits for anything


def start_server(metrics_port):
    port_file = os.path.join(TMP, "port")
    server = subprocess.Popen(
        [os.path.join(RUNFILES, "server/psync_server"), "--port=0", "--port_file=" + port_file,
         f"--metrics_port={metrics_port}"] + JOB)
    deadline = time.monotonic() + BOUND_S
    while not os.path.exists(port_file):
        if server.poll() is not None:
            raise RuntimeError(f"psync_server exited with {server.returncode}")
        if time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(f"psync_server wrote no {port_file} in {BOUND_S} s")
        time.sleep(0.05)
    with open(port_file) as f:
        return server, int(f.read().strip())


def pulls_waiting(metrics_port):
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=BOUND_S) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("psync_server_pulls_waiting "):
                return float(line.split()[1])
    return None


def zeros():
    return [torch.zeros(shape) for _, shape in LAYOUT]


def gradients(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(-64, 64, shape, generator=g).float() / 8 for _, shape in LAYOUT]


def sgd(weights, grads, sample_count):
    return [w - LR * (g / sample_count) for w, g in zip(weights, grads)]


class ClientTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.metrics_port = free_port()
        cls.server, port = start_server(cls.metrics_port)
        cls.address = f"127.0.0.1:{port}"
        cls.client = pt.Client(["--servers=" + cls.address] + JOB, LAYOUT, train_samples=1000)

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        try:
            cls.server.wait(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            cls.server.kill()

    def test_a_workers_life(self):
        # One ordered scenario: each part needs the servers where the last left them.
        self.trains_as_sgd_computed_here()
        self.bad_tensors_are_named()
        self.client.finish(2)
        self.waits_release_the_gil_and_cancel_ends_them()

    def trains_as_sgd_computed_here(self):
        c = self.client
        self.assertEqual(c.layout, LAYOUT)
        self.assertEqual(c.register(), 0)
        w0 = zeros()
        c.pull(0, w0)
        # The servers' initial weights (common/model/init.h): He-uniform, biases zero.
        self.assertGreater(w0[0].abs().min().item(), 0)
        self.assertTrue(torch.equal(w0[1], torch.zeros(40)))

        # One push-pull of every tensor.
        g0, w1 = gradients(0), zeros()
        c.push_pull(0, 2, g0, w1)
        for got, want in zip(w1, sgd(w0, g0, 2)):
            self.assertTrue(torch.equal(got, want))
        again = zeros()
        c.pull(1, again)
        for got, want in zip(again, w1):
            self.assertTrue(torch.equal(got, want))

        # Tensor by tensor, the last first, as backward produces them; the
        # weights land in the parameters themselves.
        model = torch.nn.Linear(20, 40)
        with torch.no_grad():
            model.weight.copy_(w1[0])
            model.bias.copy_(w1[1])
        params = [model.weight, model.bias]
        g1 = gradients(1)
        c.start_push_pull(1, 4, 1, [g1[1]], [model.bias])
        c.start_push_pull(1, 4, 0, [g1[0]], [model.weight])
        c.wait()
        for got, want in zip(params, sgd(w1, g1, 4)):
            self.assertTrue(torch.equal(got.detach(), want))

    def bad_tensors_are_named(self):
        c = self.client
        w = zeros()
        w[1] = torch.zeros(41)
        with self.assertRaises(psync.InvalidArgumentError) as e:
            c.pull(0, w)
        self.assertIn("tensor 1 'fc.bias' has shape [41], the layout says [40]", str(e.exception))
        self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
        self.assertIsInstance(e.exception, ValueError)
        w = zeros()
        w[0] = w[0].double()
        with self.assertRaisesRegex(TypeError, r"weights\[0\] \(tensor 0 'fc.weight'\) is "
                                               r"torch.float64, expected torch.float32"):
            c.pull(0, w)
        with self.assertRaisesRegex(TypeError, "is not contiguous"):
            c.pull(0, [torch.zeros(20, 40).t(), torch.zeros(40)])
        with self.assertRaisesRegex(TypeError, r"weights\[1\] \(tensor 1 'fc.bias'\) is sparse"):
            c.pull(0, [torch.zeros(40, 20), torch.zeros(40).to_sparse()])
        with self.assertRaisesRegex(TypeError, "is a list, expected a torch.Tensor"):
            c.pull(0, [torch.zeros(40, 20), [0.0] * 40])
        with self.assertRaisesRegex(ValueError, "precision is 'half', expected 'wire' or 'master'"):
            c.pull(0, zeros(), precision="half")
        with self.assertRaisesRegex(psync.InvalidArgumentError, "--frobnicate: no such job flag"):
            pt.Client(["--servers=" + self.address, "--frobnicate=1"], LAYOUT)

    def test_an_unknown_server_is_named(self):
        address = f"127.0.0.1:{free_port()}"
        c = pt.Client(["--servers=" + address, "--connect_timeout_s=1"], LAYOUT)
        with self.assertRaises(psync.Error) as e:
            c.register()
        self.assertIn(address, str(e.exception))
        self.assertNotEqual(e.exception.code, "OK")

    def waits_release_the_gil_and_cancel_ends_them(self):
        c = self.client
        outcome = {}

        def pull_the_next_version():
            try:
                c.pull(3, zeros())  # the servers are at version 2: waits for 3
            except psync.Error as e:
                outcome["code"] = e.code

        t = threading.Thread(target=pull_the_next_version)
        t.start()
        # This thread runs Python (reads the server's metrics) while the pull
        # waits on the server: it could not if the pull held the GIL.
        deadline = time.monotonic() + BOUND_S
        while pulls_waiting(self.metrics_port) != 1:
            self.assertTrue(t.is_alive(), f"the pull ended: {outcome}")
            self.assertLess(time.monotonic(), deadline, "the pull never waited on the server")
            time.sleep(0.01)
        c.cancel()
        t.join(timeout=BOUND_S)
        self.assertFalse(t.is_alive())
        self.assertEqual(outcome.get("code"), "CANCELLED")


class ImportCheckTest(unittest.TestCase):

    def test_another_torch_version_is_refused_naming_both(self):
        code = ("import sys, torch\n"
                "torch.__version__ = '9.9.9'\n"
                "try:\n"
                "    import psync\n"
                "except ImportError as e:\n"
                "    print(e)\n"
                "    sys.exit(0 if 'psync._psync' not in sys.modules else 2)\n"
                "sys.exit(1)\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=BOUND_S)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("built for torch " + torch.__version__, r.stdout)
        self.assertIn("loaded torch 9.9.9", r.stdout)

    def test_the_torch_it_was_built_for_is_accepted(self):
        self.assertEqual(psync.built_torch_version, torch.__version__)


class InstallTest(unittest.TestCase):

    def test_the_installed_package_imports_outside_bazel(self):
        prefix = os.path.join(TMP, "prefix")
        r = subprocess.run([os.path.join(RUNFILES, "deploy/install"), prefix],
                           capture_output=True, text=True, timeout=BOUND_S)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("the Python package psync in", r.stdout)
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.path.join(prefix, "lib/python"),
               "PYTHONNOUSERSITE": "1"}
        code = "import psync.torch, sys; print(psync.torch.__file__)"
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=BOUND_S, env=env, cwd=TMP)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(r.stdout.startswith(os.path.join(prefix, "lib/python/psync/")), r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
