#!/usr/bin/python3
"""v2_readme.py - the KServe v2 examples of docs/kserve-v2.md (the curl blocks marked
<!-- e2e: curl v2-... -->) run as written against posattnd, and the served
openapi.yaml documenting the v2 routes.

    tests/e2e/harness.sh /usr/bin/python3 tests/e2e/v2_readme.py   # starts the servers
"""

import json
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from v2_common import TIMEOUT, URL, call  # noqa: E402  (tests/e2e/v2_common.py)
from examples import EXAMPLES, read_examples  # noqa: E402  (tests/e2e/examples.py)


def run_readme(name):
    """Runs the sh block after <!-- e2e: curl NAME --> (docs/kserve-v2.md) against URL."""
    import subprocess

    text = read_examples()
    m = re.search(r"<!-- e2e: curl %s -->\s*```\w*\n(.*?)\n```" % re.escape(name), text, re.S)
    assert m, "no curl example named %s in %s" % (name, EXAMPLES)
    code = m.group(1).replace("http://127.0.0.1:8080", URL)
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", code], capture_output=True,
                       timeout=TIMEOUT, text=True)
    assert p.returncode == 0, "example %s: exit %d: %s" % (name, p.returncode, p.stderr)
    return p.stdout


class Readme(unittest.TestCase):
    def test_metadata(self):
        lines = run_readme("v2-metadata").splitlines()
        self.assertEqual(lines[0], "200")
        self.assertEqual(json.loads(lines[1])["extensions"], ["binary_tensor_data", "statistics",
                                                            "sequence", "sequence(string_id)"])
        meta = json.loads(lines[2])
        self.assertEqual(meta["inputs"][-1], {"name": "slopes", "datatype": "FP32", "shape": [-1]})

    def test_infer(self):
        ans = json.loads(run_readme("v2-infer"))
        self.assertEqual((ans["id"], ans["model_name"]), ("42", "attention-rope"))
        self.assertEqual(ans["outputs"], [{"name": "output", "datatype": "FP32",
                                           "shape": [2, 1, 2], "data": [1, 2, 2, 3]}])

    def test_binary(self):
        head, values = run_readme("v2-binary").splitlines()
        self.assertEqual(json.loads(head)["outputs"][0]["parameters"], {"binary_data_size": 16})
        self.assertEqual(values, "(1.0, 2.0, 2.0, 3.0)")

    def test_error(self):
        body, status = run_readme("v2-error").rstrip().rsplit("\n", 1)
        self.assertEqual(status, "HTTP 400")
        self.assertEqual(json.loads(body), {"error": "q.datatype='INT8' is not supported: input "
                                            "q of model attention-rope is FP32, FP16, BF16 or "
                                            "FP64"})

    def test_openapi_documents_v2(self):
        _, _, text = call("GET", "/openapi.yaml")
        for path in ("/v2:", "/v2/health/live:", "/v2/health/ready:", "/v2/models/{model}:",
                     "/v2/models/{model}/ready:", "/v2/models/{model}/infer:"):
            self.assertIn("\n  %s\n" % path, text.decode())


if __name__ == "__main__":
    argv = [a for a in sys.argv if a != "-q"]
    unittest.main(argv=argv, verbosity=1 if "-q" in sys.argv else 2)
