"""The static report's checker on fake reports and fake compiler output (no nvcc needed; ctest gpu_static.checker)."""
import contextlib
import copy
import io
import os
import sys
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptxas_report as pr  # noqa: E402


def entry(kernel, file, arch="sm_80", registers=40, shared_bytes=1024, spills=(0, 0), hmma=0):
    return dict(file=file, kernel=kernel, arch=arch, registers=registers, shared_bytes=shared_bytes,
                spill_stores=spills[0], spill_loads=spills[1], stack_bytes=0, hmma=hmma)


REPORT = [entry("layer_norm_forward_kernel<float>", "layer_norm.cu"),
          entry("permute_kernel<float>", "layout.cu", registers=100),
          entry("attention_forward_kernel<__nv_bfloat16, 64>", "attention.cu", arch="sm_90", hmma=64)]


def changed(index, **fields):
    new = copy.deepcopy(REPORT)
    new[index].update(fields)
    return new


class Compare(unittest.TestCase):
    def test_the_same_report_passes(self):
        self.assertEqual(pr.compare(REPORT, REPORT), [])
        both_archs = REPORT + [entry("attention_forward_kernel<__nv_bfloat16, 64>", "attention.cu", hmma=64)]
        self.assertEqual(pr.compare(both_archs, both_archs, sass=True), [])

    def test_a_spill_in_a_hot_kernel_fails_even_when_committed(self):
        spilling = changed(0, spill_stores=4, spill_loads=4)
        [problem] = pr.compare(spilling, spilling)
        self.assertIn("a hot kernel spills", problem)

    def test_a_new_spill_in_any_kernel_fails(self):
        [problem] = pr.compare(REPORT, changed(1, spill_loads=8))
        self.assertIn("permute_kernel<float> (layout.cu, sm_80): spills 8 bytes, the report 0", problem)

    def test_registers_up_11_percent_fail_and_5_percent_pass(self):
        [problem] = pr.compare(REPORT, changed(1, registers=111))
        self.assertIn("registers 100 -> 111 (over +10%)", problem)
        self.assertIn(pr.UPDATE_COMMAND, problem)
        self.assertEqual(pr.compare(REPORT, changed(1, registers=105)), [])
        self.assertEqual(pr.compare(REPORT, changed(1, registers=110)), [])

    def test_shared_memory_up_11_percent_fails(self):
        [problem] = pr.compare(REPORT, changed(0, shared_bytes=1137))
        self.assertIn("shared_bytes 1024 -> 1137", problem)

    def test_a_kernel_missing_from_the_report_fails_naming_the_update_command(self):
        new = REPORT + [entry("new_kernel", "layout.cu")]
        [problem] = pr.compare(REPORT, new)
        self.assertIn("new_kernel (layout.cu, sm_80): not in the committed report; run "
                      "`python3 tests/gpu/static/ptxas_report.py update`", problem)

    def test_a_kernel_gone_from_the_sources_fails(self):
        [problem] = pr.compare(REPORT, REPORT[:2] + [entry("x", "attention.cu", hmma=1)])[1:]
        self.assertIn("no longer compiled", problem)

    def test_an_attention_kernel_losing_its_hmma_fails(self):
        problems = pr.compare(REPORT, changed(2, hmma=0), sass=True)
        self.assertIn("no HMMA (tensor-core) instruction in its SASS; the report has 64", problems[0])
        self.assertIn("no attention kernel issues an HMMA instruction for sm_90", problems[-1])

    def test_a_known_spill_is_tolerated_up_to_its_bytes(self):
        key = ("attention_forward_kernel<__nv_bfloat16, 64>", "sm_80")
        limit = 8
        with mock.patch.dict(pr.KNOWN_HOT_SPILLS, {key: limit}):
            report = [entry(key[0], "attention.cu", spills=(limit // 2, limit - limit // 2), hmma=1)]
            self.assertEqual(pr.compare(report, report), [])
            worse = [entry(key[0], "attention.cu", spills=(limit, 4), hmma=1)]
            self.assertIn("a hot kernel spills", pr.compare(report, worse)[0])


class Skip(unittest.TestCase):
    def test_a_missing_tool_skips_with_77_saying_which(self):
        def missing(sass):
            raise pr.Missing("nvcc not found (on PATH, $NVCC or /usr/local/cuda/bin)")

        generate, pr.generate = pr.generate, missing
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                self.assertEqual(pr.check(sass=False), 77)
        finally:
            pr.generate = generate
        self.assertIn("skipped: nvcc not found", out.getvalue())


PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN7tessera4cuda1fEv' for 'sm_90'
ptxas info    : Function properties for _ZN7tessera4cuda1fEv
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 80 registers, used 1 barriers, 2048 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function '_ZN7tessera4cuda1gEv' for 'sm_90'
ptxas info    : Function properties for _ZN7tessera4cuda1gEv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 22 registers, used 0 barriers, 380 bytes cmem[0]
"""

SASS = """	code for sm_90
		Function : _ZN7tessera4cuda1fEv
        /*0100*/                   HMMA.16816.F32.BF16 R16, R24.reuse, R16, RZ ;
        /*0110*/                   HMMA.1684.F32.TF32 R16, R24, R16, R16 ;
        /*0120*/                   FFMA R1, R2, R3, R4 ;
		Function : _ZN7tessera4cuda1gEv
        /*0100*/                   FFMA R1, R2, R3, R4 ;
"""


class Parse(unittest.TestCase):
    def test_ptxas_verbose_output(self):
        kernels = pr.parse_ptxas(PTXAS)
        self.assertEqual(kernels["_ZN7tessera4cuda1fEv"], dict(registers=80, shared_bytes=2048, spill_stores=4,
                                                               spill_loads=12, stack_bytes=8))
        self.assertEqual(kernels["_ZN7tessera4cuda1gEv"]["shared_bytes"], 0)

    def test_hmma_counted_per_function(self):
        self.assertEqual(pr.count_hmma(SASS), {"_ZN7tessera4cuda1fEv": 2, "_ZN7tessera4cuda1gEv": 0})

    def test_short_names_drop_namespaces_and_parameters(self):
        self.assertEqual(pr.short_name("void tessera::cuda::(anonymous namespace)::k<float, 64>(float const*, "
                                       "tessera::cuda::Shape)"), "k<float, 64>")
        self.assertEqual(pr.short_name("void tessera::cuda::axpy_kernel(float*, long)"), "axpy_kernel")


if __name__ == "__main__":
    unittest.main()
