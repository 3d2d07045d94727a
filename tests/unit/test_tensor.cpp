#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>

#include "tensor/tensor.h"

namespace tessera {
namespace {

TEST(Tensor, ShapeDtypeAndAlignment) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_EQ(t.device(), Device::cpu);
  EXPECT_EQ(t.nbytes(), 96u);
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32}) {
    for (std::int64_t n : {1, 3, 17, 1000}) {
      Tensor u = Tensor::empty({n}, dt);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(u.raw_data()) % 64, 0u) << dtype_name(dt) << " n=" << n;
    }
  }
  EXPECT_EQ(t.describe(), "float32[2, 3, 4] cpu");
}

TEST(Tensor, ReshapeIsAViewAndInfersOneDimension) {
  Tensor t = Tensor::from(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor r = t.reshape({3, -1});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  r.data<float>()[0] = 42;
  EXPECT_EQ(t.data<float>()[0], 42);  // shares storage
  EXPECT_EQ(t.clone().data<float>()[0], 42);
}

TEST(Tensor, ErrorsNameTheOperationAndShapes) {
  Tensor t = Tensor::zeros({2, 3});
  try {
    (void)t.reshape({4, 2});
    FAIL() << "reshape did not throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "reshape: cannot view [2, 3] (6 elements) as [4, 2]");
  }
  try {
    (void)t.data<double>();
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "Tensor::data: asked for float64 elements of a float32[2, 3] cpu tensor");
  }
  EXPECT_THROW((void)Tensor::from(std::vector<float>{1, 2, 3}, {2, 2}), Error);
  try {
    check_same_shape("add", Tensor::zeros({2, 3}), Tensor::zeros({3, 2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "add: shape mismatch [2, 3] vs [3, 2]");
  }
  try {
    check_same_dtype("add", Tensor::zeros({2}), Tensor::zeros({2}, DType::f64));
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "add: dtype mismatch float32 vs float64 (shapes [2] and [2])");
  }
  EXPECT_THROW((void)t.size(2), Error);
  EXPECT_THROW((void)t.item(), Error);
  // A shape whose element count wraps around 64 bits (it counted 0 elements and allocated none).
  try {
    (void)Tensor::zeros({std::int64_t{1} << 62, 4});
    FAIL() << "an overflowing shape was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "shape [4611686018427387904, 4] has more elements than 64 bits count");
  }
  EXPECT_THROW((void)Tensor::from(std::vector<float>{}, {std::int64_t{1} << 62, 4}), Error);
  EXPECT_THROW((void)Tensor::empty({std::int64_t{1} << 62}, DType::f64), Error);  // elements fit, bytes do not
}

TEST(Tensor, CudaSlotReportsClearlyWithoutAGpu) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present";
  try {
    (void)Tensor::zeros({2}).to(Device::cuda);
    FAIL() << "copy to cuda did not throw without a GPU";
  } catch (const Error& e) {
    std::string msg = e.what();
    std::transform(msg.begin(), msg.end(), msg.begin(), [](unsigned char c) { return std::tolower(c); });
    EXPECT_NE(msg.find("cuda"), std::string::npos) << e.what();
  }
}

TEST(BFloat16, RoundsToNearestEvenAndRoundTrips) {
  // Values exactly representable in bf16 round-trip.
  for (float f : {0.0f, 1.0f, -2.5f, 3.140625f, std::ldexp(1.0f, 100), -std::ldexp(1.0f, -100)})
    EXPECT_EQ(bf16::from_float(f).to_float(), f);
  // 1 + 2^-8 lies exactly between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(bf16::from_float(1.0f + 1.0f / 256).to_float(), 1.0f);
  // 1 + 3*2^-8 lies between 1 + 2^-7 and 1 + 2^-6: ties to even gives 1 + 2^-6.
  EXPECT_EQ(bf16::from_float(1.0f + 3.0f / 256).to_float(), 1.0f + 1.0f / 64);
  EXPECT_EQ(bf16::from_float(1.0f + 1.5f / 256).to_float(), 1.0f + 1.0f / 128);  // above the tie: rounds up
  EXPECT_TRUE(std::isnan(bf16::from_float(std::nanf("")).to_float()));
  EXPECT_TRUE(std::isinf(bf16::from_float(INFINITY).to_float()));
  // Conversion through the tensor API.
  Tensor t = Tensor::from(std::vector<float>{1.0f, 0.1f, -7.0f}, {3});
  Tensor h = t.to(DType::bf16);
  EXPECT_EQ(h.dtype(), DType::bf16);
  EXPECT_EQ(h.nbytes(), 6u);
  const auto back = h.to(DType::f32).to_doubles();
  EXPECT_EQ(back[0], 1.0);
  EXPECT_NEAR(back[1], 0.1, 0.1 / 128);  // 8 bits of mantissa
  EXPECT_EQ(back[2], -7.0);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(HostAllocator, ReusesFreedBlocksAndCountsBytes) {
  const MemoryStats before = host_memory_stats();
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty({1000, 1000});  // 4 MB
    first = t.raw_data();
    EXPECT_GE(host_memory_stats().in_use, before.in_use + 4000000);
  }
  EXPECT_EQ(host_memory_stats().in_use, before.in_use);
  EXPECT_GE(host_memory_stats().cached, 4000000u);
  const std::size_t system_allocations = host_memory_stats().system_allocations;
  Tensor again = Tensor::empty({1000, 1000});
  EXPECT_EQ(again.raw_data(), first);  // the same block, no new pages
  EXPECT_EQ(host_memory_stats().system_allocations, system_allocations);
  EXPECT_EQ(host_memory_stats().reserved(), host_memory_stats().in_use + host_memory_stats().cached);
  EXPECT_GE(host_memory_stats().peak_in_use, 4000000u);
  again = Tensor();
  release_cached_host_memory();
  EXPECT_EQ(host_memory_stats().cached, 0u);
}

// Batches of slightly different shapes (here 14,800 and 15,200 bytes) share one size class, so
// the second reuses the first's block instead of faulting in new pages.
TEST(HostAllocator, NearbySizesShareABlock) {
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty({100, 37});
    first = t.raw_data();
  }
  Tensor again = Tensor::empty({100, 38});
  EXPECT_EQ(again.raw_data(), first);
}

#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSERA_TEST_ASAN 1
#endif
#endif

// In the checking build (AddressSanitizer) the cache marks its blocks: a write past a tensor's end
// that stays inside its block (3 floats of a 64-byte block), or a read of a freed tensor whose block
// is cached, is reported as malloc's blocks are; a block handed out again may be used whole.
TEST(HostAllocatorDeathTest, AddressSanitizerSeesOverrunsAndFreedTensors) {
#ifndef TESSERA_TEST_ASAN
  GTEST_SKIP() << "needs the AddressSanitizer build (cmake -DTESSERA_SANITIZE=ON)";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor t = Tensor::zeros({3});
  volatile float* past_the_end = t.data<float>() + 3;
  EXPECT_DEATH(*past_the_end = 1.0f, "use-after-poison");
  const volatile float* freed = nullptr;
  {
    Tensor u = Tensor::zeros({5});
    freed = u.data<float>();
  }
  EXPECT_DEATH((void)*freed, "use-after-poison");
  Tensor reused = Tensor::zeros({16});  // 64 bytes: the freed tensor's block, whole
  EXPECT_EQ(static_cast<const void*>(reused.data<float>()), const_cast<const float*>(freed));
  reused.data<float>()[15] = 1.0f;
  EXPECT_EQ(reused.data<float>()[15], 1.0f);
#endif
}

}  // namespace
}  // namespace tessera
