"""check_report.py's kernel section on a fake benchmark output, on the CPU (ctest gpu.check_report_roofline)."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_report  # noqa: E402

# Layer norm: 67.2 MB at 3.35 TB/s is 20.05 us, so 33.5 us is 60% of the memory roofline; the GEMM:
# 137.4 GFLOP at 989 TFLOP/s is 139 us, so 278 us is 50% of the tensor-core roofline.
BENCH = """# a note from the benchmark
kernel,dtype,shape,ms,bytes,flops,peak
layer_norm_forward,bf16,16384x1024,0.0335,67182592,134217728,fp32
matmul,bf16,16384x4096x1024,0.2780,184549376,137438953472,tensor
attention_forward,bf16,16x32x1024x64,1.0000,4294967296,0,fp32
odd,bf16,1,abc,1,1,fp32
untimed,bf16,1,0.000000,1,1,fp32
"""


def report(gpu_name):
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(BENCH)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        check_report.kernels(f.name, gpu_name)
    os.unlink(f.name)
    return out.getvalue()


class Kernels(unittest.TestCase):
    def test_achieved_rates_and_roofline_fractions_on_an_h100(self):
        text = report("NVIDIA H100 80GB HBM3")
        self.assertIn("Roofline: NVIDIA H100 80GB HBM3: 3.35 TB/s, 989 TFLOP/s bf16 tensor, 67 TFLOP/s fp32.", text)
        self.assertIn("| layer_norm_forward | bf16 | 16384x1024 | 0.034 | 2005 | 4.01 | 2.0 | memory | 60% |", text)
        self.assertIn("| matmul | bf16 | 16384x4096x1024 | 0.278 | 664 | 494.38 | 744.7 | tensor compute | 50% |", text)
        self.assertIn("| attention_forward | bf16 | 16x32x1024x64 | 1.000 | 4295 | 0.00 | 0.0 | memory | 128% |", text)

    def test_notes_and_rows_not_understood_are_shown(self):
        text = report("NVIDIA H100 80GB HBM3")
        self.assertIn("    # a note from the benchmark", text)
        self.assertIn("| odd | row not understood:", text)
        self.assertIn("| untimed | row not understood:", text)

    def test_the_gpu_name_picks_its_peaks_and_an_unknown_one_says_so(self):
        self.assertIn("2.0 TB/s, 756 TFLOP/s bf16 tensor", report("NVIDIA H100 PCIe"))
        self.assertIn("4.8 TB/s, 989 TFLOP/s bf16 tensor, 67 TFLOP/s fp32.", report("NVIDIA H200"))
        self.assertIn("the H200's: no peaks known for 'Some GPU'", report("Some GPU"))
        # Layer norm at the H200's 4.8 TB/s: 14.0 us of 33.5 us.
        self.assertIn("| memory | 42% |", report("NVIDIA H200"))


if __name__ == "__main__":
    unittest.main()
