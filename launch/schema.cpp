#include "launch/schema.h"

namespace tessera::launch {

const io::Schema& tessera_schema() {
  static const io::Schema schema = [] {
    io::Schema s;
    // ---- model: the paper's base model by default
    s.integer("model.layers", 6, 1, 64, "encoder and decoder layers (N)")
        .integer("model.d_model", 512, 8, 16384, "model width (d_model)")
        .integer("model.d_ff", 2048, 8, 65536, "inner width of the position-wise feed-forward network (d_ff)")
        .integer("model.heads", 8, 1, 256, "attention heads (h); d_model must divide by it")
        .real("model.dropout", 0.1, 0.0, 0.9, "dropout on sub-layer outputs and embedding + position sums (P_drop)")
        .string("model.norm", "post", {"post", "pre"},
                "layer norm after each residual sum (paper) or inside the branch")
        .boolean("model.share_embeddings", true, "one embedding for source and target (needs a joint vocabulary)")
        .boolean("model.tie_output", true, "pre-softmax weights = target embedding")
        .integer("model.max_positions", 1024, 16, 65536, "longest sequence the positional table covers");
    // ---- data
    s.string("data.task", "translation", {"translation", "copy", "reverse", "sort"},
             "parallel text, or a built-in synthetic task that needs no files")
        .string(
            "data.train_src", "", {},
            "training source text, one sentence a line (.gz allowed; a file, not a pipe: it is read more than once)")
        .string("data.train_tgt", "", {}, "training target text, line-aligned with train_src")
        .string("data.valid_src", "", {}, "validation source text")
        .string("data.valid_tgt", "", {}, "validation target text (the BLEU reference)")
        .boolean("data.joint_vocab", true,
                 "one vocabulary for both languages (false: one per language; needs model.share_embeddings false)")
        .string("data.vocab", "", {},
                "SentencePiece model (the source side's when not joint); empty: train one into output.dir on first use")
        .string("data.vocab_tgt", "", {},
                "target-side SentencePiece model when data.joint_vocab is false; empty: train one into output.dir")
        .integer("data.vocab_size", 8000, 16, 1000000, "size of each SentencePiece vocabulary trained on first use")
        .string("data.vocab_type", "bpe", {"bpe", "unigram"}, "SentencePiece model type for a trained vocabulary")
        .integer("data.max_len", 128, 1, 65536,
                 "pairs longer than this (subword tokens) are skipped and counted; below model.max_positions")
        .boolean("data.cache", true,
                 "keep the encoded training pairs on disk: a later start (a resume) with the same text, "
                 "vocabularies and max_len reads them instead of encoding again")
        .string("data.cache_dir", "", {},
                "folder for those files (encoded_train_<hash>.bin); empty: output.dir. Runs with the same data.vocab "
                "may share one")
        .integer("data.synthetic_vocab", 20, 2, 100000, "synthetic tasks: number of distinct symbols")
        .integer("data.synthetic_min_len", 10, 1, 10000, "synthetic tasks: shortest sequence")
        .integer("data.synthetic_max_len", 20, 1, 10000, "synthetic tasks: longest sequence; below model.max_positions")
        .integer("data.synthetic_train_size", 50000, 1, 100000000, "synthetic tasks: training examples")
        .integer("data.synthetic_valid_size", 500, 1, 1000000, "synthetic tasks: validation examples");
    // ---- training
    s.integer("train.batch_tokens", 4096, 1, 10000000, "tokens per batch, padding included (rows x longest side)")
        .integer("train.accumulate", 1, 1, 1024, "batches whose gradients are summed into one update")
        .integer("train.max_steps", 100000, 1, 1000000000, "stop after this many updates")
        .integer("train.max_epochs", 0, 0, 1000000, "stop after this many epochs (0: no limit)")
        .real("train.max_minutes", 0.0, 0.0, 1e7, "stop after this much wall time (0: no limit)")
        .real("train.lr_factor", 1.0, 0.0, 1000.0, "lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)")
        .real("train.lr_peak", 0.0, 0.0, 10.0,
              "the learning rate at the end of warmup, the schedule's peak (fairseq's --lr): when set, it replaces "
              "train.lr_factor by lr_peak * (d_model * warmup)^0.5 (0: off)")
        .integer("train.warmup", 4000, 1, 100000000, "warmup steps of the learning-rate schedule")
        .string("train.lr_schedule", "inverse_sqrt", {"inverse_sqrt", "linear"},
                "after warmup: the paper's step^-0.5, or linear decay to 0 at train.max_steps")
        .real("train.adam_beta1", 0.9, 0.0, 0.999999, "Adam beta1")
        .real("train.adam_beta2", 0.98, 0.0, 0.999999, "Adam beta2")
        .real("train.adam_eps", 1e-9, 0.0, 1.0,
              "Adam epsilon (above 0 to train: a weight whose gradients have all been 0 would get 0 / 0)")
        .real("train.label_smoothing", 0.1, 0.0, 0.99, "label smoothing (epsilon_ls)")
        .real("train.clip_norm", 0.0, 0.0, 1e6, "clip the global gradient norm to this (0: off)")
        .integer("train.seed", 1, 0, 4294967295,
                 "seed of initialization, data order, dropout and a synthetic task's examples (its validation set too)")
        .integer("train.log_every", 100, 1, 100000000, "steps between log lines")
        .integer("train.valid_every", 1000, 0, 100000000, "steps between validations (0: only at the end)")
        .integer("train.valid_max_sentences", 0, 0, 100000000, "validate BLEU on at most this many sentences (0: all)")
        .integer("train.patience", 0, 0, 1000000,
                 "stop early when this many validations in a row have not beaten the best train.best_metric score so "
                 "far (0: never)")
        .string("train.best_metric", "bleu", {"bleu", "chrf", "ppl"},
                "the validation score that picks checkpoint_best.h5 and counts train.patience: BLEU (exact match for "
                "synthetic tasks), chrF2, or perplexity (lower is better)")
        .string("train.device", "cpu", {"cpu", "cuda"},
                "where the model trains: cpu, or cuda (one GPU per process, chosen by its rank on the machine)")
        .string("train.precision", "fp32", {"fp32", "bf16"},
                "bf16: bfloat16 copies of the weights and bfloat16 activations in compute; float32 master weights, "
                "optimizer and loss (train.device: cuda only)")
        .boolean("train.tf32", false, "float32 GEMMs on the GPU's TF32 tensor cores (faster, ~10 mantissa bits)");
    // ---- decoding
    s.integer("decode.beam", 4, 1, 1000, "beam size (1: greedy)")
        .real("decode.length_penalty", 0.6, 0.0, 10.0, "alpha of the length penalty ((5 + len) / 6)^alpha")
        .integer("decode.max_extra_len", 50, 0, 100000,
                 "a translation may have at most as many tokens as its source, eos included (as fairseq counts "
                 "it), + this many (and model.max_positions)")
        .integer("decode.batch_sentences", 64, 1, 100000, "sentences decoded together");
    // ---- parallelism (mpirun -np tensor*data)
    s.integer("parallel.tensor", 1, 1, 4096,
              "tensor-parallel ranks: attention heads and d_ff split over them (adjacent ranks: keep a group on "
              "one machine)")
        .integer("parallel.data", 1, 1, 1000000,
                 "data-parallel replicas; parallel.tensor x parallel.data must equal the number of processes")
        .real("parallel.bucket_mb", 25.0, 0.001, 65536.0,
              "MiB of gradients per all-reduce bucket (started as soon as backward finishes the bucket)")
        .boolean("parallel.overlap", true,
                 "start each bucket's all-reduce during backward (false: all after backward, to measure overlap)")
        .real("parallel.timeout_s", 300.0, 0.0, 1e7,
              "a rank waiting longer than this in one collective (a peer died or hangs) exits, ending the job "
              "(0: wait forever; not while rank 0 reads the corpus and trains the vocabulary at the start; a "
              "tensor-parallel checkpoint save or load counts as one wait: keep it above a save's time)")
        .boolean("parallel.measure_comm", false,
                 "a barrier after backward, so the logged all-reduce wait excludes load imbalance (benchmarks)");
    // ---- checkpoints
    s.integer("checkpoint.every", 1000, 0, 100000000,
              "steps between checkpoints (0: only at the end, on a signal and at a new best)")
        .integer("checkpoint.keep_last", 5, 0, 1000000, "step checkpoints kept; older ones are deleted (0: keep all)")
        .boolean("checkpoint.keep_best", true,
                 "also keep checkpoint_best.h5: the best validation score (train.best_metric) so far");
    // ---- output
    s.string("output.dir", "checkpoints/run", {}, "folder for the checkpoint, config, vocabulary and metrics");
    return s;
  }();
  return schema;
}

models::TransformerConfig model_config(const io::Config& cfg, std::int64_t src_vocab, std::int64_t tgt_vocab) {
  models::TransformerConfig m;
  m.src_vocab = src_vocab;
  m.tgt_vocab = tgt_vocab;
  m.encoder_layers = m.decoder_layers = cfg.integer("model.layers");
  m.d_model = cfg.integer("model.d_model");
  m.d_ff = cfg.integer("model.d_ff");
  m.heads = cfg.integer("model.heads");
  m.dropout = cfg.real("model.dropout");
  m.pre_norm = cfg.string("model.norm") == "pre";
  m.share_embeddings = cfg.boolean("model.share_embeddings");
  m.tie_output = cfg.boolean("model.tie_output");
  m.max_positions = cfg.integer("model.max_positions");
  return m;
}

models::TransformerConfig training_model_config(const io::Config& cfg, std::int64_t src_vocab, std::int64_t tgt_vocab) {
  models::TransformerConfig m = model_config(cfg, src_vocab, tgt_vocab);
  m.device = cfg.string("train.device") == "cuda" ? Device::cuda : Device::cpu;
  m.bf16_compute = cfg.string("train.precision") == "bf16";
  return m;
}

models::DecodeOptions decode_options(const io::Config& cfg) {
  return {.beam = cfg.integer("decode.beam"),
          .length_penalty = cfg.real("decode.length_penalty"),
          .max_extra_len = cfg.integer("decode.max_extra_len"),
          .sampling = std::nullopt};
}

std::vector<KeyDifference> model_shape_differences(const io::Config& first, const io::Config& second) {
  std::vector<KeyDifference> differ;
  const auto compare = [&](const std::string& key) {
    if (first.values().at(key) != second.values().at(key))
      differ.push_back({key, first.values().at(key), second.values().at(key)});
  };
  for (const char* key :
       {"model.layers", "model.d_model", "model.d_ff", "model.norm", "model.share_embeddings", "model.tie_output"})
    compare(key);
  const auto synthetic = [](const io::Config& c) { return c.string("data.task") != "translation"; };
  if (synthetic(first) != synthetic(second)) {
    compare("data.task");
  } else if (synthetic(first)) {
    compare("data.synthetic_vocab");
  }
  return differ;
}

}  // namespace tessera::launch
