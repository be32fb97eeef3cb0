"""Unit tests of the stpar Python package on small hand-written plans
(test/Python/plan-package.test runs them; the same test also reads plans
that `stpar plan` wrote)."""

import copy
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import stpar  # noqa: E402
from stpar.__main__ import main  # noqa: E402


def make_plan():
    def op(name, loops, seconds, temporal=None):
        return {"name": name, "kind": "matmul", "layer_kind": "mlp",
                "layer": 0, "spec": {"loops": loops, "temporal": temporal},
                "seconds_per_micro_batch": seconds, "compute_seconds": seconds,
                "comm_seconds": 0.0, "memory_bytes": 1024,
                "tensors": [{"name": "I", "role": "input",
                             "layout": "[b/x0, n]", "shape": [8, 4]}]}
    return {
        "format": "stpar-plan", "version": 1,
        "producer": {"name": "stpar", "version": "0.1.0"},
        "model": "m.onnx", "cluster": "c", "devices": 4,
        "summary": "pp=1 dp=2 tp=2 m=1",
        "mesh": {"axes": [{"name": "pp", "size": 1, "role": "pp"},
                          {"name": "x0", "size": 2, "role": "dp",
                           "search_name": "x7"},
                          {"name": "x1", "size": 2, "role": "tp"}],
                 "pipeline_stages": 1, "micro_batches": 1, "zero_stage": 0},
        "operators": [
            op("fc1", [{"name": "b", "extent": 8, "axes": ["x0"]},
                       {"name": "k", "extent": 4, "axes": ["x1"]},
                       {"name": "n", "extent": 4, "reduction": True,
                        "axes": []}], 1e-3),
            op("fc2", [{"name": "b", "extent": 8, "axes": ["x0"]},
                       {"name": "n", "extent": 4, "reduction": True,
                        "axes": ["x1"]}], 2e-3)],
        "communication": [
            {"op": "fc2", "label": "fc2", "phase": "forward",
             "kind": "all-reduce", "axes": ["x1"], "bytes": 2048,
             "sent_bytes": 2048, "count": 1, "source": "operator",
             "what": "partial sums", "seconds": 1e-5, "link": "intra-node"}],
        "times": {"step": 0.01}, "memory": {"total": 2 ** 30},
    }


class LoadTest(unittest.TestCase):
    def test_objects(self):
        plan = stpar.parse_plan(make_plan())
        self.assertEqual(plan.summary, "pp=1 dp=2 tp=2 m=1")
        self.assertEqual(plan.mesh.devices, 4)
        self.assertEqual(plan.mesh.axis("x1").role, "tp")
        self.assertEqual(plan.mesh.axis("x0").search_name, "x7")
        self.assertEqual(plan.mesh.axis("x1").search_name, "")
        self.assertEqual(plan.operator("fc1").partition, "b{x0} k{x1}")
        self.assertEqual(plan.operator("fc2").tensors[0].layout, "[b/x0, n]")
        self.assertEqual(plan.communication[0].link, "intra-node")
        self.assertEqual(plan.sent_bytes_by_operator(), {"fc2": 2048.0})
        self.assertAlmostEqual(plan.step_seconds, 0.01)

    def test_temporal_and_replicated(self):
        data = make_plan()
        data["operators"][0]["spec"]["loops"] = [
            {"name": "b", "extent": 8, "axes": []}]
        data["operators"][1]["spec"]["temporal"] = {
            "row_axis": "x0", "col_axis": "x1", "m": "b", "n": "n",
            "k": "k", "steps": 2}
        plan = stpar.parse_plan(data)
        self.assertEqual(plan.operators[0].partition, "replicated")
        self.assertEqual(plan.operators[1].partition,
                         "b{x0} n{x1} temporal(x0,x1: m=b n=n k=k)")

    def test_errors(self):
        with self.assertRaisesRegex(stpar.PlanError, "not an stpar plan"):
            stpar.parse_plan({"format": "other"})
        data = make_plan()
        data["version"] = 2
        with self.assertRaisesRegex(stpar.PlanError, "schema version 2"):
            stpar.parse_plan(data)
        data = make_plan()
        del data["operators"][1]["spec"]
        with self.assertRaisesRegex(stpar.PlanError,
                                    r"operators\[1\]: missing 'spec'"):
            stpar.parse_plan(data)
        data = make_plan()
        data["times"]["step"] = "fast"
        with self.assertRaisesRegex(stpar.PlanError, "'step' is not float"):
            stpar.parse_plan(data)
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "bad.json")
            with open(bad, "w") as f:
                f.write("{\n  oops")
            with self.assertRaisesRegex(stpar.PlanError, r"bad.json:2:3"):
                stpar.load_plan(bad)

    def test_csv(self):
        text = stpar.parse_plan(make_plan()).to_csv()
        rows = text.splitlines()
        self.assertEqual(rows[0].split(",")[:5],
                         ["name", "kind", "layer_kind", "layer", "partition"])
        self.assertTrue(rows[2].startswith("fc2,matmul,mlp,0,b{x0} n{x1},"))
        self.assertIn(",2048.0,", rows[2])
        self.assertEqual(len(rows), 3)


class DiffTest(unittest.TestCase):
    def test_identical(self):
        a = stpar.parse_plan(make_plan(), "a")
        diff = stpar.diff_plans(a, stpar.parse_plan(make_plan(), "b"))
        self.assertTrue(diff.identical)
        self.assertEqual(diff.unchanged, 2)

    def test_changes(self):
        data = make_plan()
        data["operators"][1]["spec"]["loops"][1]["axes"] = []
        data["operators"][1]["seconds_per_micro_batch"] = 3e-3
        data["communication"] = []
        data["times"]["step"] = 0.02
        data["summary"] = "pp=1 dp=2 repl=2 m=1"
        data["operators"].append(copy.deepcopy(data["operators"][0]))
        data["operators"][2]["name"] = "fc3"
        diff = stpar.diff_plans(stpar.parse_plan(make_plan(), "a"),
                                stpar.parse_plan(data, "b"))
        self.assertFalse(diff.identical)
        self.assertEqual(diff.changed,
                         [("fc2", "b{x0} n{x1}", "b{x0}", 1e-3)])
        self.assertEqual(diff.only_b, ["fc3"])
        self.assertEqual(diff.communication,
                         [("fc2", "forward", "all-reduce", "x1", 2048.0,
                           0.0)])
        d = diff.to_dict()
        self.assertAlmostEqual(d["step_seconds"]["delta"], 0.01)
        self.assertEqual(d["settings"],
                         [{"key": "summary", "a": "pp=1 dp=2 tp=2 m=1",
                           "b": "pp=1 dp=2 repl=2 m=1"}])
        text = diff.to_text()
        self.assertIn("fc2: b{x0} n{x1} -> b{x0} (+1.0000 ms", text)
        self.assertIn("step time: 10.000 ms -> 20.000 ms (+10.000 ms, "
                      "2.000x)", text)


class CommandLineTest(unittest.TestCase):
    def run_main(self, argv):
        out, err = io.StringIO(), io.StringIO()
        old = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            rc = main(argv)
        finally:
            sys.stdout, sys.stderr = old
        return rc, out.getvalue(), err.getvalue()

    def test_commands(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.json")
            with open(path, "w") as f:
                json.dump(make_plan(), f)
            rc, out, _ = self.run_main(["summary", path])
            self.assertEqual(rc, 0)
            self.assertIn("summary pp=1 dp=2 tp=2 m=1", out)
            self.assertIn("x1=2 (tp)", out)
            rc, out, _ = self.run_main(["diff", path, path, "--json"])
            self.assertEqual(json.loads(out)["operators"]["unchanged"], 2)
            rc, _, err = self.run_main(["csv", os.path.join(d, "none")])
            self.assertEqual(rc, 1)
            self.assertIn("stpar: error:", err)


if __name__ == "__main__":
    unittest.main()
