#!/bin/sh
# The command line's main paths under the sanitizer build (cmake -DTESSERA_SANITIZE=ON): train on a
# slice of Multi30k (vocabularies, encoding, batching, dropout, validation with beam search,
# checkpoints), resume, translate (greedy, beam with n-best, sampling, an ensemble), score, average,
# vocab; then under mpirun: the MPI tests (tessera_mpi_tests, 4 ranks: collectives, the parallel
# model, sharded checkpoints) when given, tensor-parallel training, its resumption data-parallel,
# and a translation shared by the ranks (2 ranks). An AddressSanitizer, LeakSanitizer or
# UndefinedBehaviorSanitizer report ends its command with status 66 or 67, and the script with it.
# Usage: smoke.sh TESSERA WORKDIR [MPI_TESTS]
set -eu
tessera=$1 work=$2 mpi_tests=${3:-}
here=$(cd "$(dirname "$0")/../.." && pwd)
data=$here/configs/data/multi30k
rm -rf "$work" && mkdir -p "$work"
export ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1:exitcode=67 UBSAN_OPTIONS=print_stacktrace=1:exitcode=66 OMP_NUM_THREADS=2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
step() { echo "== $*"; }
zcat "$data/train.en.gz" | head -n 3000 > "$work/train.en"
zcat "$data/train.de.gz" | head -n 3000 > "$work/train.de"
n=$(wc -l < "$data/sample.en")
zcat "$data/test_2016_flickr.de.gz" | head -n "$n" > "$work/ref.de"

step train
"$tessera" train --config "$here/configs/quickstart.yaml" --set data.train_src="$work/train.en" \
  --set data.train_tgt="$work/train.de" --set data.vocab_size=1000 --set train.max_steps=12 --set train.log_every=4 \
  --set train.valid_every=6 --set train.valid_max_sentences=30 --set decode.beam=3 --set checkpoint.every=6 \
  --set output.dir="$work/run"
step resume
"$tessera" train --config "$work/run/config.yaml" --resume --set train.max_steps=18
step translate
"$tessera" translate --checkpoint "$work/run/model.h5" -i "$data/sample.en" -o "$work/hyp.de"
"$tessera" translate --checkpoint "$work/run/model.h5" -i "$data/sample.en" --beam 4 --nbest 2 -o "$work/nbest.de"
"$tessera" translate --checkpoint "$work/run/model.h5" -i "$data/sample.en" --sample --top-k 5 --seed 1 -o "$work/sample.de"
"$tessera" translate --checkpoint "$work/run/model.h5" "$work/run/checkpoint_00000012.h5" -i "$data/sample.en" -o "$work/ensemble.de"
step score
"$tessera" score --ref "$work/ref.de" --hyp "$work/hyp.de" -m bleu chrf chrf++
"$tessera" score --ref "$work/ref.de" --checkpoint "$work/run/model.h5" --src "$data/sample.en" --json
step average
"$tessera" average "$work/run/checkpoint_00000012.h5" "$work/run/checkpoint_00000018.h5" -o "$work/average.h5"
step vocab
"$tessera" vocab --from-checkpoint "$work/average.h5" --model-prefix "$work/restored"
"$tessera" vocab --input "$work/train.en" --model-prefix "$work/en" --vocab-size 500
[ -s "$work/hyp.de" ] && [ -s "$work/nbest.de" ] && [ -s "$work/average.h5" ] || { echo "FAIL: an output is missing"; exit 1; }

# mpi RANKS COMMAND...: Open MPI's own allocations kept to exit are not reported (see lsan_mpi.supp).
mpi() {
  ranks=$1 && shift
  LSAN_OPTIONS=suppressions=$here/tests/sanitize/lsan_mpi.supp ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0 \
    OMP_NUM_THREADS=1 mpirun -np "$ranks" --oversubscribe "$@"
}
if [ -n "$mpi_tests" ]; then
  step "mpirun: $mpi_tests"
  mpi 4 "$mpi_tests"
fi
step "mpirun: train tensor-parallel, resume data-parallel"
mpi 2 "$tessera" train --config "$here/configs/quickstart.yaml" --set data.train_src="$work/train.en" \
  --set data.train_tgt="$work/train.de" --set data.vocab_size=1000 --set train.max_steps=6 --set train.log_every=3 \
  --set train.valid_every=6 --set train.valid_max_sentences=30 --set decode.beam=3 --set checkpoint.every=3 \
  --set parallel.tensor=2 --set output.dir="$work/tp"
mpi 2 "$tessera" train --config "$work/tp/config.yaml" --resume --set train.max_steps=9 --set parallel.tensor=1 \
  --set parallel.data=2
step "mpirun: translate"
mpi 2 "$tessera" translate --checkpoint "$work/tp/model.h5" -i "$data/sample.en" --beam 3 -o "$work/hyp_mpi.de"
"$tessera" translate --checkpoint "$work/tp/model.h5" -i "$data/sample.en" --beam 3 -o "$work/hyp_one.de"
cmp "$work/hyp_mpi.de" "$work/hyp_one.de" || { echo "FAIL: 2 ranks translated otherwise than one process"; exit 1; }
echo PASS
