// Tensor: a shape, a dtype, a device and contiguous row-major storage shared between views.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "tensor/allocator.h"
#include "tensor/dtype.h"

namespace tessera {

using Shape = std::vector<std::int64_t>;

std::string shape_str(const Shape& s);
std::int64_t shape_numel(const Shape& s);

// Owns one allocation; tensors that are views (reshape) share it.
class Storage {
 public:
  Storage(std::size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* ptr_;
  std::size_t bytes_;
  Device device_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor (no storage)

  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32) { return full(shape, 1.0, dtype); }
  // Copies `values` (row-major) into a new CPU tensor of dtype T.
  template <typename T>
  static Tensor from(const std::vector<T>& values, const Shape& shape);
  // Same, converting each value to `dtype` (float32, float64 or bfloat16).
  static Tensor from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  std::int64_t dim() const { return static_cast<std::int64_t>(shape_.size()); }
  std::int64_t size(std::int64_t d) const;  // negative d counts from the end
  std::int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  std::string describe() const;  // e.g. "float32[2, 3] cpu"

  // Typed access to CPU data; throws when T is not the tensor's dtype or the tensor is not on the CPU.
  template <typename T>
  T* data();
  template <typename T>
  const T* data() const;
  void* raw_data() const { return static_cast<char*>(storage_->data()) + offset_bytes_; }
  // How many tensors (this one and its views) share this tensor's storage; 0 when undefined.
  // Backward writes into a gradient that it alone holds: memory is only ever shared through Tensors.
  long storage_users() const { return storage_.use_count(); }

  // A view with a new shape and the same elements (one dimension may be -1).
  Tensor reshape(const Shape& shape) const;
  // A view of rows [start, start + length) of dimension 0 (contiguous, no copy).
  Tensor narrow_rows(std::int64_t start, std::int64_t length) const;
  Tensor clone() const;
  Tensor to(DType dtype) const;    // converted copy (same tensor if dtype already matches)
  Tensor to(Device device) const;  // copy to another device (same tensor if already there)
  void fill(double value);
  void copy_from(const Tensor& src);  // same shape and dtype, any devices
  double item() const;                // value of a one-element tensor (on any device), as double
  std::vector<double> to_doubles() const;

 private:
  std::shared_ptr<Storage> storage_;
  std::size_t offset_bytes_ = 0;
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;

  void check_access(DType want, const char* who) const;
};

// Precondition checks shared by kernels and ops: they name the operation and the shapes.
void check_defined(const char* op, const Tensor& t, const char* what);
void check_same_shape(const char* op, const Tensor& a, const Tensor& b);
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);
void check_cpu(const char* op, const Tensor& t);
void check_float(const char* op, const Tensor& t);  // float32 or float64
void check_rank(const char* op, const Tensor& t, std::int64_t rank, const char* what);

// Calls fn.template operator()<T>() with T = float or double per the tensor's dtype.
template <typename Fn>
decltype(auto) dispatch_float(const char* op, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      return fn.template operator()<float>();
    case DType::f64:
      return fn.template operator()<double>();
    default:
      fail("{}: expects float32 or float64, got {}", op, dtype_name(dtype));
  }
}

// ---- template definitions ----
template <typename T>
Tensor Tensor::from(const std::vector<T>& values, const Shape& shape) {
  TESSERA_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape),
                "Tensor::from: {} values do not fill shape {}", values.size(), shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>::value);
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

template <typename T>
T* Tensor::data() {
  check_access(dtype_of<T>::value, "data");
  return static_cast<T*>(raw_data());
}

template <typename T>
const T* Tensor::data() const {
  check_access(dtype_of<T>::value, "data");
  return static_cast<const T*>(raw_data());
}

}  // namespace tessera
