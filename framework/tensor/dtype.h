// Element types and devices, plus bfloat16 as a storage type.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera {

// i32 holds token ids, targets and masks; the float types hold values.
enum class DType : std::uint8_t { f32, f64, bf16, i32 };
enum class Device : std::uint8_t { cpu, cuda };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "float32";
    case DType::f64:
      return "float64";
    case DType::bf16:
      return "bfloat16";
    case DType::i32:
      return "int32";
  }
  return "?";
}

constexpr std::string_view device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

// bfloat16: the top 16 bits of an IEEE float32. Conversion rounds to nearest even and
// keeps NaN a NaN (a quiet NaN with the sign kept), matching CUDA's __float2bfloat16.
struct bf16 {
  std::uint16_t bits = 0;

  static constexpr bf16 from_float(float f) {
    const auto u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};
    const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return bf16{static_cast<std::uint16_t>((u + rounding) >> 16)};
  }
  constexpr float to_float() const { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }
};

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::i32;
};

}  // namespace tessera
