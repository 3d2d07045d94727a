#!/usr/bin/env python3
"""check_code_limits.py on small made-up trees: each limit fails one line past it, and the
allowlist's entries pass what they name and fail once they are no longer needed."""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_code_limits.py")


def function_of(lines, name="long_function"):
    """C++ source of one function `lines` lines long, first line to last."""
    body = "".join("  x += 1;\n" for _ in range(lines - 2))
    return f"int {name}(int x) {{\n{body}}}\n"


class CheckCodeLimits(unittest.TestCase):
    def run_check(self, files, allowlist=""):
        """(exit status, output) of the script on a tree holding `files` {path: text}."""
        with tempfile.TemporaryDirectory() as root:
            for path, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
                with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                    f.write(text)
            with open(os.path.join(root, "allowlist.txt"), "w", encoding="utf-8") as f:
                f.write(allowlist)
            run = subprocess.run([sys.executable, SCRIPT, "--root", root, "--allowlist",
                                  os.path.join(root, "allowlist.txt")],
                                 capture_output=True, text=True, check=False)
            return run.returncode, run.stdout + run.stderr

    def test_a_function_fails_one_line_past_100(self):
        status, _ = self.run_check({"models/a.cpp": function_of(100)})
        self.assertEqual(status, 0)
        status, output = self.run_check({"framework/nn/a.cpp": function_of(101)})
        self.assertEqual(status, 1)
        self.assertIn("FAIL: function long_function (framework/nn/a.cpp:1) has 101 lines, over 100", output)

    def test_a_file_fails_one_line_past_700(self):
        self.assertEqual(self.run_check({"launch/a.h": "\n" * 700})[0], 0)
        status, output = self.run_check({"launch/a.h": "\n" * 701})
        self.assertEqual(status, 1)
        self.assertIn("FAIL: file launch/a.h has 701 lines, over 700", output)

    def test_tests_are_not_product_code(self):
        self.assertEqual(self.run_check({"tests/a.cpp": function_of(300)})[0], 0)

    def test_allowlisted_entries_pass_and_fail_once_within_the_limits(self):
        code = "namespace n {\nstruct Run { int train(int x); };\n" + function_of(150, "Run::train") + "}\n"
        files = {"launch/trainer.cpp": code}
        self.assertEqual(self.run_check(files, "function Run::train  # the loop\n")[0], 0)
        status, output = self.run_check({"launch/trainer.cpp": function_of(20, "train")},
                                        "function Run::train  # the loop\nfile launch/trainer.cpp  # big\n")
        self.assertEqual(status, 1)
        self.assertIn("allowlist.txt:1: 'function Run::train' is within the limits now (or gone)", output)
        self.assertIn("allowlist.txt:2: 'file launch/trainer.cpp' is within the limits now (or gone)", output)

    def test_string_keyed_lookups_outside_the_config_code_fail(self):
        lookup = 'int f(const Config& cfg) { return cfg.integer("train.max_steps"); }\n'
        self.assertEqual(self.run_check({"framework/io/config.cpp": lookup, "launch/schema.cpp": lookup})[0], 0)
        status, output = self.run_check({"launch/trainer.cpp": "\n" + lookup})
        self.assertEqual(status, 1)
        self.assertIn("FAIL: lookups: launch/trainer.cpp looks config keys up by their names (lines 2)", output)
        self.assertEqual(self.run_check({"launch/trainer.cpp": lookup}, "lookups launch/trainer.cpp  # for now\n")[0], 0)

    def test_an_entry_without_a_reason_is_refused(self):
        status, output = self.run_check({"models/a.cpp": function_of(10)}, "function Run::train\n")
        self.assertEqual(status, 1)
        self.assertIn("allowlist.txt:1: expected 'function NAME # why'", output)


if __name__ == "__main__":
    unittest.main()
