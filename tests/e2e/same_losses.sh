# Sourced by the training scripts that compare runs step by step (needs $work, a scratch folder;
# run() also $tessera and $common, the settings of every run, and a fail function).
# Per step: the loss and the global gradient norm (Adam hides a gradient scaled by a constant from
# the losses, e.g. replicated parameters counted once per tensor-parallel rank; the norm shows it).
losses() { sed -n 's/^{"step": \([0-9]*\), "epoch": [0-9]*, "loss": \([^,]*\),.*, "grad_norm": \([^,]*\),.*/\1 \2 \3/p' "$1" | awk '{l[$1]=$2 " " $3} END {for (s in l) print s, l[s]}' | sort -k1,1; }
# same_losses A B FIRST: every step >= FIRST present in both, loss |a - b| <= 1e-5 |a|, gradient norm 2e-4 |a|.
# The gradient norm gets 2e-4, not the loss's 1e-5: ReLU's derivative jumps at 0, so a pre-activation
# within rounding of 0 that falls on the other side in an equal-in-exact-arithmetic run moves the
# norm by up to ~4e-5 (seen in a -O1 sanitizer build; with a smooth activation in its place the
# same runs agree to 3e-8), while the loss, continuous, stays within 2e-7. The bugs looked for
# (a gradient counted twice or missing a batch) move the norm by percents.
same_losses() {
  losses "$1" > "$work/a.txt" && losses "$2" > "$work/b.txt"
  join "$work/a.txt" "$work/b.txt" | awk -v first="$3" -v name="$2" '
    function differ(a, b, tol) { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; return d > tol * m }
    $1 >= first { n++; if (differ($2, $4, 1e-5) || differ($3, $5, 2e-4)) { bad++; print "step " $1 ": loss " $2 " vs " $4 ", gradient norm " $3 " vs " $5 } }
    END { if (n == 0 || bad > 0) { print "FAIL: " name ": " bad + 0 " of " n + 0 " steps differ"; exit 1 } print name ": " n " steps equal" }'
}
# identical_losses A B: every step's loss and gradient norm in both, equal as printed (the shortest
# decimal that reads back as the same double: equal bit for bit).
identical_losses() {
  losses "$1" > "$work/a.txt" && losses "$2" > "$work/b.txt"
  [ -s "$work/a.txt" ] && cmp -s "$work/a.txt" "$work/b.txt" || { diff "$work/a.txt" "$work/b.txt"; echo "FAIL: $2: not the losses of $1"; exit 1; }
  echo "$2: $(wc -l < "$work/a.txt") steps identical"
}
# run NAME NP SETTINGS...: trains into $work/NAME in NP processes (one: without mpirun), its output
# in $work/NAME.log, printed when it fails.
run() {
  name=$1 np=$2 && shift 2
  if [ "$np" -eq 1 ]; then launch=""; else launch="mpirun -np $np --oversubscribe"; fi
  $launch "$tessera" train $common "$@" --set output.dir="$work/$name" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name"; }
}
# same_weights A B TOL GROUP: every dataset of GROUP (/model, /optimizer) in the two checkpoints
# within TOL (absolute; the checksums may differ), but the key projections' biases: their gradient
# is 0 in exact arithmetic, so Adam's normalized steps on rounding noise move them by noise.
same_weights() {
  h5diff -d "$3" "$1" "$2" "$4" "$4" | sed -n 's/^dataset: <\([^>]*\)> and .*/\1/p' | grep -v 'k_proj\.bias$' \
    > "$work/differ.txt" || true
  [ ! -s "$work/differ.txt" ] || { echo "$2: differs from $1 beyond $3 in:"; cat "$work/differ.txt"; return 1; }
}
