#include "tensor/tensor.h"

#include <fmt/ranges.h>

#include <cstring>

namespace tessera {

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

std::int64_t shape_numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s)
    TESSERA_CHECK(!__builtin_mul_overflow(n, d, &n), "shape {} has more elements than 64 bits count", shape_str(s));
  return n;
}

Storage::Storage(std::size_t bytes, Device device) : ptr_(allocate(bytes, device)), bytes_(bytes), device_(device) {}

Storage::~Storage() { deallocate(ptr_, device_); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (auto d : shape) TESSERA_CHECK(d >= 0, "Tensor::empty: negative dimension in shape {}", shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  TESSERA_CHECK(static_cast<std::uint64_t>(t.numel_) <= SIZE_MAX / dtype_size(dtype),
                "Tensor::empty: shape {} of {} needs more bytes than 64 bits count", shape_str(shape),
                dtype_name(dtype));
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(t.nbytes(), device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  zero_bytes(t.raw_data(), device, t.nbytes());  // all-zero bits are 0 in every dtype
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill(value);
  return t;
}

Tensor Tensor::from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype) {
  TESSERA_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape),
                "Tensor::from_doubles: {} values do not fill shape {}", values.size(), shape_str(shape));
  Tensor t = empty(shape, dtype);
  for (std::size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::f32:
        t.data<float>()[i] = static_cast<float>(values[i]);
        break;
      case DType::f64:
        t.data<double>()[i] = values[i];
        break;
      case DType::bf16:
        t.data<bf16>()[i] = bf16::from_float(static_cast<float>(values[i]));
        break;
      case DType::i32:
        t.data<std::int32_t>()[i] = static_cast<std::int32_t>(values[i]);
        break;
    }
  }
  return t;
}

std::int64_t Tensor::size(std::int64_t d) const {
  const std::int64_t r = dim();
  const std::int64_t i = d < 0 ? d + r : d;
  TESSERA_CHECK(i >= 0 && i < r, "Tensor::size: dimension {} out of range for shape {}", d, shape_str(shape_));
  return shape_[static_cast<std::size_t>(i)];
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined";
  return fmt::format("{}{} {}", dtype_name(dtype_), shape_str(shape_), device_name(device_));
}

void Tensor::check_access(DType want, const char* who) const {
  TESSERA_CHECK(defined(), "Tensor::{}: tensor is undefined", who);
  TESSERA_CHECK(dtype_ == want, "Tensor::{}: asked for {} elements of a {} tensor", who, dtype_name(want), describe());
  TESSERA_CHECK(device_ == Device::cpu, "Tensor::{}: host access to a {} tensor", who, describe());
}

Tensor Tensor::reshape(const Shape& shape) const {
  check_defined("reshape", *this, "input");
  Shape s = shape;
  std::int64_t known = 1;
  int infer = -1;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      TESSERA_CHECK(infer < 0, "reshape: more than one -1 in target shape {}", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      TESSERA_CHECK(s[i] >= 0, "reshape: invalid target shape {}", shape_str(shape));
      known *= s[i];
    }
  }
  if (infer >= 0) {
    TESSERA_CHECK(known > 0 && numel_ % known == 0, "reshape: cannot view {} as {}", shape_str(shape_),
                  shape_str(shape));
    s[static_cast<std::size_t>(infer)] = numel_ / known;
  }
  TESSERA_CHECK(shape_numel(s) == numel_, "reshape: cannot view {} ({} elements) as {}", shape_str(shape_), numel_,
                shape_str(shape));
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::narrow_rows(std::int64_t start, std::int64_t length) const {
  check_defined("narrow_rows", *this, "input");
  TESSERA_CHECK(dim() >= 1 && start >= 0 && length >= 0 && start + length <= shape_[0],
                "narrow_rows: rows [{}, {}) out of range for shape {}", start, start + length, shape_str(shape_));
  Tensor t = *this;
  const std::int64_t row = numel_ / std::max<std::int64_t>(shape_[0], 1);
  t.offset_bytes_ += static_cast<std::size_t>(start * row) * dtype_size(dtype_);
  t.shape_[0] = length;
  t.numel_ = row * length;
  return t;
}

Tensor Tensor::clone() const {
  check_defined("clone", *this, "input");
  Tensor t = empty(shape_, dtype_, device_);
  copy_bytes(t.raw_data(), device_, raw_data(), device_, nbytes());
  return t;
}

Tensor Tensor::to(DType dtype) const {
  check_defined("to", *this, "input");
  if (dtype == dtype_) return *this;
  check_cpu("to(dtype)", *this);
  return from_doubles(to_doubles(), shape_, dtype);
}

Tensor Tensor::to(Device device) const {
  check_defined("to", *this, "input");
  if (device == device_) return *this;
  Tensor t = empty(shape_, dtype_, device);
  copy_bytes(t.raw_data(), device, raw_data(), device_, nbytes());
  return t;
}

void Tensor::fill(double value) {
  check_cpu("fill", *this);
  const std::int64_t n = numel_;
  switch (dtype_) {
    case DType::f32:
      std::fill_n(data<float>(), n, static_cast<float>(value));
      break;
    case DType::f64:
      std::fill_n(data<double>(), n, value);
      break;
    case DType::bf16:
      std::fill_n(data<bf16>(), n, bf16::from_float(static_cast<float>(value)));
      break;
    case DType::i32:
      std::fill_n(data<std::int32_t>(), n, static_cast<std::int32_t>(value));
      break;
  }
}

void Tensor::copy_from(const Tensor& src) {
  check_same_shape("copy_from", *this, src);
  check_same_dtype("copy_from", *this, src);
  copy_bytes(raw_data(), device_, src.raw_data(), src.device_, nbytes());
}

double Tensor::item() const {
  TESSERA_CHECK(numel_ == 1, "item: tensor {} has {} elements, not 1", describe(), numel_);
  return device_ == Device::cpu ? to_doubles()[0] : to(Device::cpu).to_doubles()[0];  // a GPU value waits for it
}

std::vector<double> Tensor::to_doubles() const {
  check_cpu("to_doubles", *this);
  std::vector<double> out(static_cast<std::size_t>(numel_));
  for (std::size_t i = 0; i < out.size(); ++i) {
    switch (dtype_) {
      case DType::f32:
        out[i] = data<float>()[i];
        break;
      case DType::f64:
        out[i] = data<double>()[i];
        break;
      case DType::bf16:
        out[i] = data<bf16>()[i].to_float();
        break;
      case DType::i32:
        out[i] = data<std::int32_t>()[i];
        break;
    }
  }
  return out;
}

void check_defined(const char* op, const Tensor& t, const char* what) {
  TESSERA_CHECK(t.defined(), "{}: {} tensor is undefined", op, what);
}

void check_same_shape(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "first");
  check_defined(op, b, "second");
  TESSERA_CHECK(a.shape() == b.shape(), "{}: shape mismatch {} vs {}", op, shape_str(a.shape()), shape_str(b.shape()));
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  TESSERA_CHECK(a.dtype() == b.dtype(), "{}: dtype mismatch {} vs {} (shapes {} and {})", op, dtype_name(a.dtype()),
                dtype_name(b.dtype()), shape_str(a.shape()), shape_str(b.shape()));
}

void check_cpu(const char* op, const Tensor& t) {
  check_defined(op, t, "input");
  TESSERA_CHECK(t.device() == Device::cpu, "{}: expects a cpu tensor, got {}", op, t.describe());
}

void check_float(const char* op, const Tensor& t) {
  check_defined(op, t, "input");
  TESSERA_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, "{}: expects float32 or float64, got {}", op,
                t.describe());
}

void check_rank(const char* op, const Tensor& t, std::int64_t rank, const char* what) {
  check_defined(op, t, what);
  TESSERA_CHECK(t.dim() == rank, "{}: {} must have {} dimensions, got shape {}", op, what, rank, shape_str(t.shape()));
}

}  // namespace tessera
