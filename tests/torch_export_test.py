"""What torch workers leave behind, against real psync_server processes:
worker 0 alone writes --export_path (the model's whole state_dict, a
BatchNorm's buffers included, loadable with load_state_dict and equal bit
for bit to what it trained) and --summary (psync_worker's keys, the torch
version and the script's metrics, the sha256 of the file's data); the same
from LocalOptimizer's root; with --wire_dtype=bf16 the export holds the
servers' float32 master weights; bad output paths, metrics, files and
parameter dtypes are refused by name. save_file/load_file round-trip every
dtype. Run by run_python_test.sh with the interpreter psync was built for;
bounds its own time and stops its processes.

Run as `torch_export_test.py worker OUT FLAG...` it is one DistributedOptimizer
worker, `torch_export_test.py local OUT FLAG...` one LocalOptimizer process
(torchrun's variables in its environment); each saves its final state_dict
to OUT."""

import contextlib
import hashlib
import io
import json
import os
import re
import struct
import subprocess
import sys
import unittest
from typing import Dict, List, Sequence, Tuple

import torch
import torch.nn.functional as F

import psync
import psync.torch as pt
from psync.export import RunOutputs
from psync_servers import Servers, free_port, wait_all

STEPS = 6
BATCH = 16  # the global batch
JOB = [f"--steps={STEPS}", "--chunk_kb=1", "--lr=0.05", "--momentum=0.9",
       "--pull_timeout_s=60", "--rpc_timeout_s=60", "--connect_timeout_s=30",
       "--peer_timeout_s=60"]
METRICS = {"test_accuracy": 0.5, "epochs_seen": 2, "note": "bn \"net\""}

State = Dict[str, torch.Tensor]


class Net(torch.nn.Module):
    """An MLP with a BatchNorm: buffers of float32 and int64 (num_batches_tracked)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.fc1 = torch.nn.Linear(10, 12)
        self.bn = torch.nn.BatchNorm1d(12)
        self.fc2 = torch.nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def batch(step: int):
    g = torch.Generator().manual_seed(700 + step)
    return torch.randn(BATCH, 10, generator=g), torch.randint(0, 3, (BATCH,), generator=g)


def clone_state(model: torch.nn.Module) -> State:
    return {n: t.detach().clone() for n, t in model.state_dict().items()}


def train(opt, model: torch.nn.Module, share: int, index: int) -> None:
    """Trains to STEPS on share `index` (of `share` samples) of every global batch."""
    while opt.step_number < STEPS:
        x, y = batch(opt.step_number)
        part = slice(index * share, (index + 1) * share)
        opt.zero_grad()
        F.cross_entropy(model(x[part]), y[part]).backward()
        opt.step()


def worker_main(out: str, args: Sequence[str]) -> None:
    job = pt.init(list(args))
    model = Net()
    with pt.DistributedOptimizer(model, job) as opt:
        train(opt, model, job.worker_batch, job.worker_rank)
        opt.finish(metrics=METRICS)
    torch.save(clone_state(model), out)


def local_main(out: str, args: Sequence[str]) -> None:
    job = pt.init(list(args))
    local = pt.init_local(job, timeout_s=60)
    model = Net()
    try:
        with pt.LocalOptimizer(model, job, local) as opt:
            train(opt, model, job.batch_per_device, opt.device_rank)
    finally:
        local.close()
    torch.save(clone_state(model), out)


def run_processes(mode: str, args_of: List[List[str]],
                  envs: List[dict]) -> Tuple[List[State], List[str]]:
    """Runs this file in `mode` once per entry; returns each one's final state and
    stderr. Raises AssertionError naming one that failed."""
    tmp = os.environ["TEST_TMPDIR"]
    outs = [os.path.join(tmp, f"{mode}{i}.{free_port()}.pt") for i in range(len(args_of))]
    logs = [o + ".stderr" for o in outs]
    processes = []
    for out, log, args, env in zip(outs, logs, args_of, envs):
        with open(log, "w") as f:
            processes.append(subprocess.Popen([sys.executable, __file__, mode, out] + args,
                                              env=dict(os.environ, **env), stderr=f))
    codes = wait_all(processes)
    stderr = []
    for i, (code, log) in enumerate(zip(codes, logs)):
        with open(log) as f:
            stderr.append(f.read())
        if code != 0:
            raise AssertionError(f"{mode} process {i} exited with {code}: {stderr[-1]}")
    return [torch.load(o) for o in outs], stderr


def data_sha256(path: str) -> str:
    """SHA-256 of a safetensors file's data section (after its 8-byte length and header)."""
    with open(path, "rb") as f:
        raw = f.read()
    return hashlib.sha256(raw[8 + struct.unpack("<Q", raw[:8])[0]:]).hexdigest()


def outputs(name: str) -> List[str]:
    tmp = os.environ["TEST_TMPDIR"]
    return [os.path.join(tmp, f"{name}.safetensors"), os.path.join(tmp, f"{name}.json")]


def output_flags(name: str) -> List[str]:
    export, summary = outputs(name)
    return [f"--export_path={export}", f"--summary={summary}"]


class ExportTest(unittest.TestCase):

    def assert_exported(self, name: str, want: State, workers: int, devices: int) -> dict:
        """The export of run `name` loads into a fresh Net and equals `want` bit for
        bit; its summary agrees with it. Returns the summary."""
        export, summary_path = outputs(name)
        loaded = pt.load_file(export)
        self.assertEqual(list(loaded), list(want))  # the state_dict's names and order
        fresh = Net()
        fresh.load_state_dict(loaded)  # strict: every name, nothing more
        for key, value in clone_state(fresh).items():
            self.assertEqual(value.dtype, want[key].dtype, key)
            self.assertTrue(torch.equal(value, want[key]), key)
        self.assertEqual(loaded["bn.num_batches_tracked"].dtype, torch.int64)
        with open(summary_path) as f:
            text = f.read()
        self.assertEqual(text.count("\n"), 1)
        summary = json.loads(text)
        self.assertEqual(summary["steps"], STEPS)
        self.assertEqual(summary["global_batch"], BATCH)
        self.assertEqual(summary["workers"], workers)
        self.assertEqual(summary["devices_per_worker"], devices)
        self.assertEqual(summary["weights_sha256"], data_sha256(export))
        self.assertEqual(summary["model"], "torch:Net")
        self.assertEqual(summary["torch_version"], torch.__version__)
        self.assertGreater(summary["samples_per_sec"], 0)
        self.assertAlmostEqual(summary["learning_rate_last"], 0.05)
        self.assertIsNone(summary["test_loss"])  # not given: not measured
        return summary

    def test_worker_0_alone_writes_the_weights_and_the_summary(self):
        job = JOB + ["--num_workers=2", "--batch_per_device=8"]
        with Servers(job, count=2) as servers:
            args = [servers.flag] + job
            states, stderr = run_processes(
                "worker", [args + ["--worker_rank=0"] + output_flags("w0"),
                           args + ["--worker_rank=1"] + output_flags("w1")], [{}, {}])
        summary = self.assert_exported("w0", states[0], workers=2, devices=1)
        self.assertEqual(summary["test_accuracy"], 0.5)
        self.assertEqual(summary["epochs_seen"], 2)
        self.assertEqual(summary["note"], "bn \"net\"")
        self.assertEqual(summary["servers"], 2)
        self.assertIn(f"wrote weights to {outputs('w0')[0]} (sha256 "
                      f"{summary['weights_sha256']})", stderr[0])
        for path in outputs("w1"):
            self.assertFalse(os.path.exists(path), path)
        # Parameters are the servers' (every worker's); buffers worker 0's own.
        for name in ("fc1.weight", "bn.weight", "fc2.bias"):
            self.assertTrue(torch.equal(states[0][name], states[1][name]), name)
        self.assertFalse(torch.equal(states[0]["bn.running_mean"], states[1]["bn.running_mean"]))

    def test_local_optimizers_root_of_worker_0_writes_its_models_state(self):
        job = JOB + ["--num_workers=1", "--devices=2", "--batch_per_device=8"]
        port = free_port()
        envs = [dict(LOCAL_RANK=str(r), RANK=str(r), LOCAL_WORLD_SIZE="2", WORLD_SIZE="2",
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)) for r in range(2)]
        with Servers(job) as servers:
            args = [servers.flag] + job + ["--worker_rank=0"] + output_flags("local")
            states, stderr = run_processes("local", [args, args], envs)
        self.assert_exported("local", states[0], workers=1, devices=2)
        self.assertIn("wrote weights to", stderr[0])
        self.assertNotIn("wrote weights to", stderr[1])

    def test_a_narrow_wire_exports_the_servers_master_weights(self):
        job = JOB + ["--num_workers=1", "--batch_per_device=16", "--wire_dtype=bf16"]
        export, summary_path = outputs("bf16")
        mid = os.path.join(os.environ["TEST_TMPDIR"], "bf16_mid.safetensors")
        with Servers(job) as servers:
            model = Net()
            with pt.DistributedOptimizer(model, pt.init([servers.flag] + job +
                                                         output_flags("bf16"))) as opt:
                train(opt, model, BATCH, 0)
                opt.export(mid)
                with self.assertRaisesRegex(ValueError, r"metrics\['steps'\]: the summary "
                                                        r"writes 'steps' itself"):
                    opt.finish(metrics={"steps": 3})
                with self.assertRaisesRegex(TypeError, r"metrics\['curve'\] is a list, "
                                                       r"expected a number"):
                    opt.finish(metrics={"curve": [0.1]})
                with self.assertRaisesRegex(TypeError, r"metrics\['test_loss'\] is a str"):
                    opt.finish(metrics={"test_loss": "low"})
            # Leaving the block finished the job with no metrics.
        exported, at_mid = pt.load_file(export), pt.load_file(mid)
        with open(summary_path) as f:
            self.assertIsNone(json.load(f)["test_accuracy"])
        params = dict(model.named_parameters())
        for name, p in params.items():
            # The parameters hold the wire's rounding of the masters.
            self.assertTrue(torch.equal(exported[name], at_mid[name]), name)
            self.assertTrue(torch.equal(exported[name].bfloat16().float(), p.detach()), name)
        self.assertFalse(all(torch.equal(exported[n], p.detach()) for n, p in params.items()))


class LeftTest(unittest.TestCase):

    def test_worker_0_leaving_says_what_may_not_be_written(self):
        tmp = os.environ["TEST_TMPDIR"]
        said = {}
        for name, flags in [("without", []), ("with", ["--checkpoint_dir=/ckpt"])]:
            job = pt.init(["--servers=127.0.0.1:1", f"--export_path={tmp}/w.safetensors"] + flags)
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                RunOutputs(job, Net(), writer=False).left()  # not the writer: nothing
                RunOutputs(job, Net(), writer=True).left()
            said[name] = err.getvalue()
        self.assertEqual(said["without"],
                         f"psync: worker 0 left the job before its end; only worker 0 writes "
                         f"--export_path ({tmp}/w.safetensors), so they are written only if it "
                         f"joins again before the end. Otherwise, without --checkpoint_dir, the "
                         f"final weights are lost once the servers stop\n")
        self.assertIn("psync_ckpt export --checkpoint_dir=/ckpt --out=FILE writes them",
                      said["with"])


class RefusedTest(unittest.TestCase):
    """What needs no servers: each is refused before anything is sent."""

    def test_bad_output_paths_name_the_flag_and_the_path(self):
        tmp = os.environ["TEST_TMPDIR"]
        a_file = os.path.join(tmp, "a_file")
        with open(a_file, "w"):
            pass
        for flag in ("--export_path", "--summary"):
            for path in (os.path.join(tmp, "no", "such", "dir", "w"),
                         os.path.join(a_file, "w"), tmp):
                job = pt.init(["--servers=127.0.0.1:1", f"{flag}={path}"])
                with self.assertRaises(psync.Error) as caught:
                    pt.DistributedOptimizer(Net(), job)
                self.assertIn(flag, str(caught.exception))
                self.assertIn(path, str(caught.exception))

    def test_parameters_of_other_dtypes_are_refused_naming_them(self):
        job = pt.init(["--servers=127.0.0.1:1"])
        local = pt.LocalGroup(rank=0, size=1, timeout_s=1)
        for dtype in (torch.float64, torch.float16, torch.bfloat16):
            pattern = (f"parameter 'fc1.weight' is {dtype}, expected torch.float32 .*"
                       f"model.float\\(\\)")
            with self.assertRaisesRegex(TypeError, "DistributedOptimizer: " + pattern):
                pt.DistributedOptimizer(Net().to(dtype), job)
            with self.assertRaisesRegex(TypeError, "LocalOptimizer: " + pattern):
                pt.LocalOptimizer(Net().to(dtype), job, local)


class FilesTest(unittest.TestCase):

    def test_every_dtype_round_trips(self):
        path = os.path.join(os.environ["TEST_TMPDIR"], "dtypes.safetensors")
        tensors = {"f64": torch.randn(2, 3).double(), "f16": torch.randn(4).half(),
                   "bf16": torch.randn(4).bfloat16(), "i64": torch.tensor([2 ** 40, -1]),
                   "i32": torch.tensor([7], dtype=torch.int32),
                   "i16": torch.tensor([-7], dtype=torch.int16),
                   "i8": torch.tensor([-8], dtype=torch.int8),
                   "u8": torch.tensor([255], dtype=torch.uint8),
                   "bool": torch.tensor([True, False]), "scalar": torch.tensor(1.5),
                   "empty": torch.zeros(0, 3), "transposed": torch.randn(3, 2).t()}
        digest = pt.save_file(tensors, path)
        self.assertEqual(digest, data_sha256(path))
        loaded = pt.load_file(path)
        self.assertEqual(list(loaded), list(tensors))
        for name, t in tensors.items():
            self.assertEqual(loaded[name].dtype, t.dtype, name)
            self.assertEqual(loaded[name].shape, t.shape, name)
            self.assertTrue(torch.equal(loaded[name], t), name)

    def test_bad_files_and_tensors_are_named(self):
        tmp = os.environ["TEST_TMPDIR"]
        missing = os.path.join(tmp, "missing.safetensors")
        with self.assertRaisesRegex(psync.Error,
                                    f"load_file: {re.escape(missing)}: open: No such file"):
            pt.load_file(missing)
        corrupt = os.path.join(tmp, "corrupt.safetensors")
        pt.save_file({"w": torch.ones(4)}, corrupt)
        with open(corrupt, "rb") as f:
            raw = f.read()
        for bad, why in ((raw[:-4], "truncated"), (raw[:6], "expected at least 8"),
                         (raw.replace(b"F32", b"F99"), "has dtype 'F99', expected one of")):
            with open(corrupt, "wb") as f:
                f.write(bad)
            with self.assertRaisesRegex(psync.InvalidArgumentError,
                                        f"{re.escape(corrupt)}: .*{why}"):
                pt.load_file(corrupt)
        with self.assertRaisesRegex(TypeError, r"tensors\['c'\] is torch.complex64, expected "
                                               r"a dtype safetensors stores"):
            pt.save_file({"c": torch.zeros(2, dtype=torch.complex64)}, corrupt)
        with self.assertRaisesRegex(psync.Error, re.escape(os.path.join(tmp, "no", "dir", "w"))):
            pt.save_file({"w": torch.ones(1)}, os.path.join(tmp, "no", "dir", "w"))


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] in ("worker", "local"):
        (worker_main if sys.argv[1] == "worker" else local_main)(sys.argv[2], sys.argv[3:])
    else:
        unittest.main()
