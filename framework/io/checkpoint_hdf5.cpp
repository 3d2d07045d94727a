#include "io/checkpoint_hdf5.h"

#include <bit>
#include <cstring>
#include <iterator>

namespace tessera::io::detail {

std::string h5_error() {
  std::string text;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* err, void* out) -> herr_t {
        if (n == 0 && err->desc != nullptr) *static_cast<std::string*>(out) = err->desc;
        return 0;
      },
      &text);
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? "" : " (HDF5: " + text + ")";
}

std::uint32_t header_checksum(std::int64_t step, const std::string& config_yaml) {
  std::string bytes(sizeof(step), '\0');
  std::memcpy(bytes.data(), &step, sizeof(step));
  bytes += config_yaml;
  return checksum(bytes.data(), bytes.size());
}

std::uint32_t state_checksum(std::int64_t file_step, const TrainingState& s) {
  const auto u = [](auto v) { return static_cast<std::uint64_t>(v); };
  const auto bits = [](double v) { return std::bit_cast<std::uint64_t>(v); };
  const std::uint64_t words[] = {u(file_step),
                                 u(s.step),
                                 u(s.epoch),
                                 u(s.position),
                                 s.shuffle_seed,
                                 s.dropout_seed,
                                 u(s.optimizer_step),
                                 bits(s.learning_rate),
                                 bits(s.elapsed_seconds),
                                 bits(s.best_valid),
                                 u(s.best_valid_step),
                                 u(s.validations_since_best),
                                 u(s.last_validated_step),
                                 s.train_fingerprint,
                                 u(s.fitted_max_steps)};
  // A file without a fitted max_steps sums the words before it alone, as files written before it did.
  const std::size_t count = std::size(words) - (s.fitted_max_steps == 0 ? 1 : 0);
  return checksum(words, count * sizeof(std::uint64_t));
}

}  // namespace tessera::io::detail
