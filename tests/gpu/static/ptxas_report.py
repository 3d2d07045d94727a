"""The CUDA kernels' static report: what ptxas and the SASS say of every kernel, for sm_80 and sm_90.

  ptxas_report.py update              rewrite the committed report (tests/gpu/static/report.json)
  ptxas_report.py check [--sass]      regenerate it and compare with the committed one (ctest gpu_static.*)
  ptxas_report.py compare OLD NEW [--sass]   compare two report files (the checker's own test)

Each kernel of framework/kernels/cuda/*.cu is compiled with `nvcc -cubin -Xptxas -v` per arch; the
report holds, per demangled kernel name and arch: registers, static shared memory, spill stores and
loads, stack frame (local memory), and the number of HMMA (tensor-core) instructions in its SASS
(`cuobjdump -sass`, which needs nvdisasm beside it). `check` exits 77 (ctest: skipped) with the
reason when nvcc, or for --sass cuobjdump/nvdisasm, is missing.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
REPORT = os.path.join(HERE, "report.json")
UPDATE_COMMAND = "python3 tests/gpu/static/ptxas_report.py update"
ARCHS = ("sm_80", "sm_90")
# Kernels that must never spill (the training step's hot loops), by their source file.
HOT_FILES = ("attention", "layer_norm", "cross_entropy", "adam")
# Hot kernels tolerated to spill up to these bytes (stores + loads), each printed at every run: a
# stopgap while a kernel is being replaced. Empty since issue 52 (attention.cu's __launch_bounds__
# with a minimum of one block stopped its three spills). A name the sources no longer compile is
# only reported as stale.
KNOWN_HOT_SPILLS = {}
GROWTH_LIMIT = 1.10  # registers or shared memory may grow by up to 10% without a report update
# The pip wheels that carry cuobjdump and nvdisasm (no Debian package has them); CI installs them.
SASS_TOOLS_HINT = "python3 -m pip install nvidia-cuda-cuobjdump==13.2.51 nvidia-cuda-nvdisasm==13.2.51"
FIELDS = ("registers", "shared_bytes", "spill_stores", "spill_loads", "stack_bytes", "hmma")


class Missing(Exception):
    """A tool the report needs is not installed (the check is skipped, saying which)."""


def find_nvcc():
    for path in (os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if path and os.access(path, os.X_OK):
            return path
    raise Missing("nvcc not found (on PATH, $NVCC or /usr/local/cuda/bin)")


def find_cuobjdump():
    """cuobjdump with nvdisasm in the same folder: the toolkit's or the pip wheels'."""
    dirs = [os.path.dirname(p) for p in (shutil.which("cuobjdump"),) if p] + ["/usr/local/cuda/bin"]
    try:
        import nvidia  # the wheels install nvidia/cu13/bin/{cuobjdump,nvdisasm}

        dirs += [os.path.join(p, "cu13", "bin") for p in nvidia.__path__]
    except ImportError:
        pass
    for d in dirs:
        if all(os.access(os.path.join(d, tool), os.X_OK) for tool in ("cuobjdump", "nvdisasm")):
            return os.path.join(d, "cuobjdump")
    raise Missing(f"cuobjdump and nvdisasm not found together (PATH, /usr/local/cuda/bin, pip): {SASS_TOOLS_HINT}")


def demangle(symbols):
    out = subprocess.run(["c++filt"], input="\n".join(symbols), capture_output=True, text=True, check=True).stdout
    return dict(zip(symbols, out.splitlines()))


def short_name(demangled):
    """'void tessera::cuda::(anonymous namespace)::f<float, 64>(float const*, ...)' -> 'f<float, 64>'."""
    name = re.sub(r"^void ", "", demangled)
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the parameter list starts at the first '(' outside template brackets
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0 and not name.startswith("(anonymous namespace)", i):
            cut = i
            break
    return re.sub(r"^tessera::cuda::(\(anonymous namespace\)::)?", "", name[:cut])


def parse_ptxas(text):
    """ptxas -v's stderr -> {mangled symbol: fields} (hmma not known yet)."""
    kernels, current = {}, None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = kernels.setdefault(m.group(1), dict.fromkeys(FIELDS[:-1], 0))
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            current.update(stack_bytes=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current["registers"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            current["shared_bytes"] = int(s.group(1)) if s else 0
    return kernels


def count_hmma(sass):
    """cuobjdump -sass's text -> {mangled symbol: HMMA instructions}."""
    counts, current = {}, None
    for line in sass.splitlines():
        m = re.search(r"Function : (\w+)", line)
        if m:
            current = m.group(1)
            counts[current] = 0
        elif current and re.search(r"\bHMMA\.", line):
            counts[current] += 1
    return counts


def compile_file(nvcc, source, arch, out_dir):
    cubin = os.path.join(out_dir, f"{os.path.basename(source)}.{arch}.cubin")
    cmd = [nvcc, "-std=c++17", "-O3", "-DNDEBUG", "-I", os.path.join(REPO, "framework"), "-cubin", f"-arch={arch}", "-Xptxas", "-v",
           source, "-o", cubin]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"ptxas_report: {' '.join(cmd)} failed:\n{run.stderr}")
    return cubin, parse_ptxas(run.stderr)


def generate(sass):
    """The report of the current sources: a sorted list of entries (one per kernel and arch)."""
    nvcc = find_nvcc()
    cuobjdump = find_cuobjdump() if sass else None
    sources = sorted(glob.glob(os.path.join(REPO, "framework", "kernels", "cuda", "*.cu")))
    entries = []
    with tempfile.TemporaryDirectory() as tmp:
        for source in sources:
            for arch in ARCHS:
                cubin, kernels = compile_file(nvcc, source, arch, tmp)
                hmma = {}
                if cuobjdump:
                    env = dict(os.environ, PATH=os.path.dirname(cuobjdump) + os.pathsep + os.environ.get("PATH", ""))
                    dump = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True, env=env)
                    if dump.returncode != 0:
                        sys.exit(f"ptxas_report: cuobjdump -sass {cubin} failed:\n{dump.stderr}")
                    hmma = count_hmma(dump.stdout)
                names = demangle(list(kernels))
                for symbol, fields in kernels.items():
                    entries.append(dict(file=os.path.basename(source), kernel=short_name(names[symbol]), arch=arch,
                                        **fields, hmma=hmma.get(symbol) if cuobjdump else None))
    return sorted(entries, key=lambda e: (e["file"], e["kernel"], e["arch"]))


def dump_report(entries, path):
    """One entry a line, sorted: a stable file whose diff reads kernel by kernel."""
    with open(path, "w") as f:
        f.write('{"compiler": "nvcc -O3 -DNDEBUG -cubin -Xptxas -v", "update": "%s", "kernels": [\n' % UPDATE_COMMAND)
        f.write(",\n".join(json.dumps(e) for e in entries))
        f.write("\n]}\n")


def load_report(path):
    with open(path) as f:
        return json.load(f)["kernels"]


def is_hot(entry):
    return os.path.splitext(entry["file"])[0] in HOT_FILES


def compare(old_entries, new_entries, sass=False):
    """The problems of NEW against the committed OLD: a list of messages (empty: the check passes)."""
    old = {(e["kernel"], e["arch"]): e for e in old_entries}
    new = {(e["kernel"], e["arch"]): e for e in new_entries}
    problems = []
    for key, e in sorted(new.items()):
        where = f"{e['kernel']} ({e['file']}, {e['arch']})"
        spills = e["spill_stores"] + e["spill_loads"]
        if key not in old:
            problems.append(f"{where}: not in the committed report; run `{UPDATE_COMMAND}` and commit the report")
            continue
        o = old[key]
        if sass:
            if o["hmma"] and not e["hmma"]:
                problems.append(f"{where}: no HMMA (tensor-core) instruction in its SASS; the report has {o['hmma']}")
            continue
        if spills and is_hot(e) and spills > KNOWN_HOT_SPILLS.get(key, 0):
            problems.append(f"{where}: a hot kernel spills ({e['spill_stores']} bytes stored, {e['spill_loads']} loaded)")
        elif spills > o["spill_stores"] + o["spill_loads"]:
            problems.append(f"{where}: spills {spills} bytes, the report {o['spill_stores'] + o['spill_loads']}")
        for field in ("registers", "shared_bytes"):
            if e[field] > GROWTH_LIMIT * o[field]:
                problems.append(f"{where}: {field} {o[field]} -> {e[field]} (over +10%); if intended, run "
                                f"`{UPDATE_COMMAND}` and commit the report")
    for key in sorted(set(old) - set(new)):
        problems.append(f"{key[0]} ({key[1]}): in the committed report but no longer compiled; run `{UPDATE_COMMAND}`")
    for arch in ARCHS if sass else ():
        if not any(e["hmma"] for e in new_entries if "attention" in e["file"] and e["arch"] == arch):
            problems.append(f"no attention kernel issues an HMMA instruction for {arch}")
    return problems


def check(sass):
    try:
        entries = generate(sass)
    except Missing as why:
        print(f"skipped: {why}")
        return 77
    problems = compare(load_report(REPORT), entries, sass)
    for (kernel, arch), limit in sorted(KNOWN_HOT_SPILLS.items()) if not sass else ():
        now = [e["spill_stores"] + e["spill_loads"] for e in entries if (e["kernel"], e["arch"]) == (kernel, arch)]
        state = f"spills {now[0]} bytes" if now else "stale: no longer compiled, delete its entry"
        print(f"tolerated (KNOWN_HOT_SPILLS): {kernel} ({arch}) {state} (limit {limit})")
    for p in problems:
        print("FAIL: " + p)
    what = "HMMA in the SASS" if sass else "registers, shared memory and spills"
    print(f"{len(entries)} kernel entries compared with {os.path.relpath(REPORT, REPO)} ({what}): "
          f"{'FAILED' if problems else 'passed'}")
    return 1 if problems else 0


def main(argv):
    if argv[:1] == ["update"]:
        try:
            entries = generate(sass=True)
        except Missing as why:
            sys.exit(f"ptxas_report: {why}")
        dump_report(entries, REPORT)
        print(f"wrote {REPORT}: {len(entries)} entries")
        return 0
    if argv[:1] == ["check"]:
        return check(sass="--sass" in argv)
    if argv[:1] == ["compare"] and len(argv) >= 3:
        problems = compare(load_report(argv[1]), load_report(argv[2]), "--sass" in argv)
        for p in problems:
            print("FAIL: " + p)
        return 1 if problems else 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
