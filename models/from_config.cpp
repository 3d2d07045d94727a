#include "models/from_config.h"

namespace tessera::models {

TransformerConfig model_config(const io::RunConfig& cfg, std::int64_t src_vocab, std::int64_t tgt_vocab) {
  const io::ModelConfig& c = cfg.model;
  TransformerConfig m;
  m.src_vocab = src_vocab;
  m.tgt_vocab = tgt_vocab;
  m.encoder_layers = m.decoder_layers = c.layers;
  m.d_model = c.d_model;
  m.d_ff = c.d_ff;
  m.heads = c.heads;
  m.dropout = c.dropout;
  m.pre_norm = c.norm == io::Norm::pre;
  m.share_embeddings = c.share_embeddings;
  m.tie_output = c.tie_output;
  m.max_positions = c.max_positions;
  return m;
}

TransformerConfig training_model_config(const io::RunConfig& cfg, std::int64_t src_vocab, std::int64_t tgt_vocab) {
  TransformerConfig m = model_config(cfg, src_vocab, tgt_vocab);
  m.device = cfg.train.device;
  // On the CPU, bf16 means bfloat16 GEMMs on float32 tensors (cpu::set_bf16_matmul), not a compute dtype.
  m.bf16_compute = cfg.train.precision == io::Precision::bf16 && cfg.train.device == Device::cuda;
  m.recompute_layers = cfg.train.recompute == io::Recompute::layer;
  m.vocab_parallel = cfg.parallel.vocab_parallel;
  return m;
}

DecodeOptions decode_options(const io::DecodeConfig& decode) {
  return {.beam = decode.beam,
          .length_penalty = decode.length_penalty,
          .max_extra_len = decode.max_extra_len,
          .sampling = std::nullopt};
}

}  // namespace tessera::models
