# The `tessera train` settings of the GPU check's runs, sourced by tests/gpu/check.sh and by the
# test gpu.check_runs_are_valid, which has the CPU build validate them: a renamed or refused key
# must fail CI, not the one run on a lent GPU. Each function sets the array run_args.

# small_run_args REPO DEVICE PRECISION DIR: section 2's 50 steps of the reverse task, two heads
# of 32 (a head size the GPU attention has), dropout on (the same masks on both devices).
small_run_args() {
  run_args=(--config "$1/configs/reverse.yaml" --set model.heads=2 --set model.dropout=0.1 --set train.max_steps=50
            --set train.log_every=1 --set train.valid_every=0 --set checkpoint.every=0 --set checkpoint.keep_best=false
            --set data.synthetic_valid_size=16 --set train.device="$2" --set train.precision="$3" --set output.dir="$4")
}

# throughput_run_args REPO MODEL DIR: section 5's 30 bfloat16 steps of MODEL (base or big) on the
# GPU. A copy task with a 32k vocabulary and 20-40 tokens a sentence stands in for WMT (no corpus
# needed); batches of 25k tokens as in the paper (the model's config).
throughput_run_args() {
  run_args=(--config "$1/configs/$2.yaml" --set data.task=copy --set data.synthetic_vocab=32000
            --set data.synthetic_min_len=20 --set data.synthetic_max_len=40 --set data.synthetic_train_size=100000
            --set data.synthetic_valid_size=4 --set train.device=cuda --set train.precision=bf16 --set train.max_steps=30
            --set train.log_every=10 --set train.valid_every=0 --set checkpoint.every=0 --set checkpoint.keep_best=false
            --set decode.beam=1 --set output.dir="$3")
}
