#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vector_math.h"

namespace tessera::cpu {
namespace {

constexpr std::int64_t kTileQ = 64;
constexpr std::int64_t kTileK = 64;

struct Dims {
  std::int64_t b, h, lq, lk, d, dv;
  std::int64_t k_rows;  // positions k and v hold a (b, h): lk, or a decoder cache's capacity
};

// kv_batch: the rows k, v and key_padding hold (q's, unless kv_rows picks theirs).
Dims check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding,
                     std::int64_t key_length = 0, std::int64_t kv_batch = -1) {
  const char* op = "attention";
  check_rank(op, q, 4, "q");
  check_rank(op, k, 4, "k");
  check_rank(op, v, 4, "v");
  check_float(op, q);
  check_same_dtype(op, q, k);
  check_same_dtype(op, q, v);
  check_cpu(op, q);
  check_cpu(op, k);
  check_cpu(op, v);
  TESSERA_CHECK(key_length >= 0 && key_length <= k.size(2), "attention: key_length {} outside k {}", key_length,
                shape_str(k.shape()));
  const Dims d{q.size(0), q.size(1), q.size(2), key_length > 0 ? key_length : k.size(2),
               q.size(3), v.size(3), k.size(2)};
  const std::int64_t kb = kv_batch >= 0 ? kv_batch : d.b;
  TESSERA_CHECK(k.size(0) == kb && k.size(1) == d.h && k.size(3) == d.d,
                "attention: k {} does not match q {} (need [B={}, H={}, Lk, D={}])", shape_str(k.shape()),
                shape_str(q.shape()), kb, d.h, d.d);
  TESSERA_CHECK(v.size(0) == kb && v.size(1) == d.h && v.size(2) == d.k_rows,
                "attention: v {} does not match k {} (need [B={}, H={}, Lk={}, Dv])", shape_str(v.shape()),
                shape_str(k.shape()), kb, d.h, d.lk);
  if (key_padding.defined()) {
    check_cpu(op, key_padding);
    TESSERA_CHECK(key_padding.dtype() == DType::i32 && key_padding.shape() == Shape({kb, d.lk}),
                  "attention: key_padding must be int32 [B={}, Lk={}], got {}", kb, d.lk, key_padding.describe());
  }
  return d;
}

// Masks tile S ([rows, cols] at query row q0, key col k0) in place with -inf where a query may
// not see a key.
template <typename T>
void apply_masks(T* s, std::int64_t rows, std::int64_t cols, std::int64_t q0, std::int64_t k0, const Dims& d,
                 const std::int32_t* pad, bool causal) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (std::int64_t i = 0; i < rows; ++i) {
    T* row = s + i * cols;
    if (pad) {
      for (std::int64_t j = 0; j < cols; ++j)
        if (pad[k0 + j]) row[j] = neg_inf;
    }
    if (causal) {
      const std::int64_t last = q0 + i + (d.lk - d.lq);  // last visible key
      for (std::int64_t j = std::max<std::int64_t>(0, last + 1 - k0); j < cols; ++j) row[j] = neg_inf;
    }
  }
}

// S = scale * Q[q0:q0+rows] K[k0:k0+cols]^T into s ([rows, cols]), masked with -inf.
template <typename T>
void score_tile(const T* q, const T* k, std::int64_t q0, std::int64_t rows, std::int64_t k0, std::int64_t cols,
                const Dims& d, const std::int32_t* pad, bool causal, T scale, T* s) {
  gemm_strided_batched<T>(false, true, rows, cols, d.d, scale, q + q0 * d.d, d.d, 0, k + k0 * d.d, d.d, 0, T(0), s,
                          cols, 0, 1);
  apply_masks(s, rows, cols, q0, k0, d, pad, causal);
}

// std::max drops a NaN second argument: a NaN score (NaN in Q or K) would then look like "no
// visible key" and its row would come out as zeros. This max keeps it, so the row is NaN.
template <typename T>
T max_keeping_nan(T a, T b) {
  return std::isnan(b) || b > a ? b : a;
}

// Number of keys query tile [q0, q0+rows) may see under the causal mask (all keys otherwise).
std::int64_t visible_keys(std::int64_t q0, std::int64_t rows, const Dims& d, bool causal) {
  if (!causal) return d.lk;
  return std::clamp<std::int64_t>(q0 + rows + (d.lk - d.lq), 0, d.lk);
}

template <typename T>
void forward_head(const T* q, const T* k, const T* v, const std::int32_t* pad, T* out, T* lse, const Dims& d,
                  bool causal, T scale, std::vector<T>& s, std::vector<T>& acc) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (std::int64_t q0 = 0; q0 < d.lq; q0 += kTileQ) {
    const std::int64_t rows = std::min(kTileQ, d.lq - q0);
    T row_max[kTileQ], row_sum[kTileQ];
    std::fill_n(row_max, rows, neg_inf);
    std::fill_n(row_sum, rows, T(0));
    std::fill_n(acc.data(), rows * d.dv, T(0));
    const std::int64_t kend = visible_keys(q0, rows, d, causal);
    for (std::int64_t k0 = 0; k0 < kend; k0 += kTileK) {
      const std::int64_t cols = std::min(kTileK, kend - k0);
      score_tile(q, k, q0, rows, k0, cols, d, pad, causal, scale, s.data());
      for (std::int64_t i = 0; i < rows; ++i) {
        T* srow = s.data() + i * cols;
        T m = row_max[i];
        for (std::int64_t j = 0; j < cols; ++j) m = max_keeping_nan(m, srow[j]);
        if (m == neg_inf) {  // nothing visible yet in this row: P = 0
          std::fill_n(srow, cols, T(0));
          continue;
        }
        const T correction = exp_vec(row_max[i] - m);  // exp(-inf) = 0 on the first visible tile
        T sum = 0;
#pragma omp simd reduction(+ : sum)
        for (std::int64_t j = 0; j < cols; ++j) sum += (srow[j] = exp_vec(srow[j] - m));
        row_sum[i] = row_sum[i] * correction + sum;
        row_max[i] = m;
        T* arow = acc.data() + i * d.dv;
        for (std::int64_t c = 0; c < d.dv; ++c) arow[c] *= correction;
      }
      // acc += P V_tile
      gemm_strided_batched<T>(false, false, rows, d.dv, cols, T(1), s.data(), cols, 0, v + k0 * d.dv, d.dv, 0, T(1),
                              acc.data(), d.dv, 0, 1);
    }
    for (std::int64_t i = 0; i < rows; ++i) {
      T* orow = out + (q0 + i) * d.dv;
      const T* arow = acc.data() + i * d.dv;
      if (row_sum[i] != T(0)) {  // positive, or NaN: a NaN score reaches the output and lse
        const T inv = T(1) / row_sum[i];
        for (std::int64_t c = 0; c < d.dv; ++c) orow[c] = arow[c] * inv;
        lse[q0 + i] = row_max[i] + std::log(row_sum[i]);
      } else {
        std::fill_n(orow, d.dv, T(0));
        lse[q0 + i] = neg_inf;
      }
    }
  }
}

template <typename T>
void backward_head(const T* q, const T* k, const T* v, const T* o, const T* dout, const T* lse, const std::int32_t* pad,
                   T* dq, T* dk, T* dv, const Dims& d, bool causal, T scale, std::vector<T>& p, std::vector<T>& dp,
                   std::vector<T>& delta) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  // delta_i = sum_c dO_ic O_ic  (= sum_j P_ij dP_ij)
  for (std::int64_t i = 0; i < d.lq; ++i) {
    T acc = 0;
    for (std::int64_t c = 0; c < d.dv; ++c) acc += dout[i * d.dv + c] * o[i * d.dv + c];
    delta[static_cast<std::size_t>(i)] = acc;
  }
  std::fill_n(dq, d.lq * d.d, T(0));
  std::fill_n(dk, d.lk * d.d, T(0));
  std::fill_n(dv, d.lk * d.dv, T(0));
  for (std::int64_t q0 = 0; q0 < d.lq; q0 += kTileQ) {
    const std::int64_t rows = std::min(kTileQ, d.lq - q0);
    const std::int64_t kend = visible_keys(q0, rows, d, causal);
    for (std::int64_t k0 = 0; k0 < kend; k0 += kTileK) {
      const std::int64_t cols = std::min(kTileK, kend - k0);
      // Recompute P = exp(S - lse) from the saved log-sum-exp.
      score_tile(q, k, q0, rows, k0, cols, d, pad, causal, scale, p.data());
      for (std::int64_t i = 0; i < rows; ++i) {
        T* prow = p.data() + i * cols;
        const T l = lse[q0 + i];
        if (l == neg_inf) {
          std::fill_n(prow, cols, T(0));
        } else {
          for (std::int64_t j = 0; j < cols; ++j) prow[j] = exp_vec(prow[j] - l);
        }
      }
      // dV_tile += P^T dO_tile
      gemm_strided_batched<T>(true, false, cols, d.dv, rows, T(1), p.data(), cols, 0, dout + q0 * d.dv, d.dv, 0, T(1),
                              dv + k0 * d.dv, d.dv, 0, 1);
      // dP = dO_tile V_tile^T, then dS = P * (dP - delta)
      gemm_strided_batched<T>(false, true, rows, cols, d.dv, T(1), dout + q0 * d.dv, d.dv, 0, v + k0 * d.dv, d.dv, 0,
                              T(0), dp.data(), cols, 0, 1);
      for (std::int64_t i = 0; i < rows; ++i) {
        const T di = delta[static_cast<std::size_t>(q0 + i)];
        for (std::int64_t j = 0; j < cols; ++j) dp[i * cols + j] = p[i * cols + j] * (dp[i * cols + j] - di);
      }
      // dQ_tile += scale * dS K_tile ; dK_tile += scale * dS^T Q_tile
      gemm_strided_batched<T>(false, false, rows, d.d, cols, scale, dp.data(), cols, 0, k + k0 * d.d, d.d, 0, T(1),
                              dq + q0 * d.d, d.d, 0, 1);
      gemm_strided_batched<T>(true, false, cols, d.d, rows, scale, dp.data(), cols, 0, q + q0 * d.d, d.d, 0, T(1),
                              dk + k0 * d.d, d.d, 0, 1);
    }
  }
}

// A single query (a decoding step): the scores, their softmax and the weighted sum of values in
// one pass over the keys, without the tiles' GEMM calls (most of their time, for one query row).
// key(j) and value(j): where key and value j of the query's (batch, head) are.
template <typename T, typename KeyAt, typename ValueAt>
void forward_one_query(const T* q, const KeyAt& key, const ValueAt& value, const std::int32_t* pad, T* out, T* lse,
                       const Dims& d, T scale, T* s) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  T m = neg_inf;
  for (std::int64_t j = 0; j < d.lk; ++j) {
    const T* kj = key(j);
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (std::int64_t c = 0; c < d.d; ++c) dot += q[c] * kj[c];
    s[j] = pad != nullptr && pad[j] != 0 ? neg_inf : scale * dot;
    m = max_keeping_nan(m, s[j]);
  }
  if (m == neg_inf) {  // no visible key
    std::fill_n(out, d.dv, T(0));
    *lse = neg_inf;
    return;
  }
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = 0; j < d.lk; ++j) sum += (s[j] = exp_vec(s[j] - m));
  std::fill_n(out, d.dv, T(0));
  for (std::int64_t j = 0; j < d.lk; ++j) {
    const T p = s[j];
    const T* vj = value(j);
#pragma omp simd
    for (std::int64_t c = 0; c < d.dv; ++c) out[c] += p * vj[c];
  }
  const T inv = T(1) / sum;
#pragma omp simd
  for (std::int64_t c = 0; c < d.dv; ++c) out[c] *= inv;
  *lse = m + std::log(sum);
}

// The (batch, head) of k and v that query (batch, head) bh reads.
std::int64_t kv_head(std::int64_t bh, const Dims& d, const std::vector<std::int64_t>& kv_rows) {
  return kv_rows.empty() ? bh : kv_rows[static_cast<std::size_t>(bh / d.h)] * d.h + bh % d.h;
}

template <typename T>
void forward_one_query_all(const Tensor& q, const Tensor& k, const Tensor& v, const std::int32_t* pad,
                           AttentionOutput& res, const Dims& d, T scale, const std::vector<std::int64_t>& kv_rows) {
  const bool threads = d.b * d.h * d.lk * d.d >= (std::int64_t{1} << 16);
#pragma omp parallel if (threads)
  {
    std::vector<T> s(static_cast<std::size_t>(std::max<std::int64_t>(d.lk, 1)));
#pragma omp for schedule(static)
    for (std::int64_t bh = 0; bh < d.b * d.h; ++bh) {
      const std::int64_t kvh = kv_head(bh, d, kv_rows);
      const T* kh = k.data<T>() + kvh * d.k_rows * d.d;
      const T* vh = v.data<T>() + kvh * d.k_rows * d.dv;
      forward_one_query<T>(
          q.data<T>() + bh * d.d, [&](std::int64_t j) { return kh + j * d.d; },
          [&](std::int64_t j) { return vh + j * d.dv; }, pad ? pad + (kvh / d.h) * d.lk : nullptr,
          res.out.data<T>() + bh * d.dv, res.lse.data<T>() + bh, d, scale, s.data());
    }
  }
}

// opt.key_rows: q [B, H, 1, D] over step-major k and v [capacity, R, H, D]; key j of row b is row
// key_rows[b][j] of step j.
Dims check_attention_over_steps(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding,
                                const AttentionOptions& opt) {
  const char* op = "attention";
  check_rank(op, q, 4, "q");
  check_rank(op, k, 4, "k");
  check_float(op, q);
  check_same_dtype(op, q, k);
  check_same_dtype(op, q, v);
  const Tensor& rows = opt.key_rows;
  for (const Tensor* t : {&q, &k, &v, &rows}) check_cpu(op, *t);
  const Dims d{q.size(0), q.size(1), q.size(2), opt.key_length, q.size(3), q.size(3), k.size(0)};
  TESSERA_CHECK(d.lq == 1 && !key_padding.defined() && !opt.kv_rows.defined() && v.shape() == k.shape() &&
                    k.size(2) == d.h && k.size(3) == d.d && d.lk >= 1 && d.lk <= k.size(0),
                "attention: key_rows needs one query a row, no padding or kv_rows, and step-major k = v [>= {}, R, "
                "H={}, D={}]; got q {}, k {}, v {}",
                d.lk, d.h, d.d, shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  TESSERA_CHECK(rows.dtype() == DType::i32 && rows.dim() == 2 && rows.size(0) == d.b && rows.size(1) >= d.lk,
                "attention: key_rows must be int32 [B={}, >= {}], got {}", d.b, d.lk, rows.describe());
  const std::int32_t* r = rows.data<std::int32_t>();
  for (std::int64_t b = 0; b < d.b; ++b)
    for (std::int64_t j = 0; j < d.lk; ++j)
      TESSERA_CHECK(r[b * rows.size(1) + j] >= 0 && r[b * rows.size(1) + j] < k.size(1),
                    "attention: key_rows[{}][{}] = {} is outside the {} rows of a step", b, j, r[b * rows.size(1) + j],
                    k.size(1));
  return d;
}

AttentionOutput attention_over_steps(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding,
                                     const AttentionOptions& opt) {
  const char* op = "attention";
  const Dims d = check_attention_over_steps(q, k, v, key_padding, opt);
  const Tensor& rows = opt.key_rows;
  const std::int32_t* r = rows.data<std::int32_t>();
  AttentionOutput res{Tensor::empty({d.b, d.h, 1, d.dv}, q.dtype()), Tensor::empty({d.b, d.h, 1}, q.dtype())};
  const double scale = opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(d.d));
  dispatch_float(op, q.dtype(), [&]<typename T>() {
    const std::int64_t step = k.size(1) * d.h * d.d, lineage_stride = rows.size(1);
    const T* keys = k.data<T>();
    const T* values = v.data<T>();
    const bool threads = d.b * d.h * d.lk * d.d >= (std::int64_t{1} << 16);
#pragma omp parallel if (threads)
    {
      std::vector<T> s(static_cast<std::size_t>(d.lk));
#pragma omp for schedule(static)
      for (std::int64_t bh = 0; bh < d.b * d.h; ++bh) {
        const std::int32_t* lineage = r + (bh / d.h) * lineage_stride;
        const std::int64_t head = (bh % d.h) * d.d;
        const auto at = [&](const T* x, std::int64_t j) { return x + j * step + lineage[j] * d.h * d.d + head; };
        forward_one_query<T>(
            q.data<T>() + bh * d.d, [&](std::int64_t j) { return at(keys, j); },
            [&](std::int64_t j) { return at(values, j); }, nullptr, res.out.data<T>() + bh * d.dv,
            res.lse.data<T>() + bh, d, static_cast<T>(scale), s.data());
      }
    }
  });
  return res;
}

}  // namespace

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding,
                                  const AttentionOptions& opt) {
  if (opt.key_rows.defined()) return attention_over_steps(q, k, v, key_padding, opt);
  const std::vector<std::int64_t> kv_rows =
      opt.kv_rows.defined() ? kernels::kv_row_indices(opt.kv_rows, q.size(0), k.size(0)) : std::vector<std::int64_t>{};
  const Dims d = check_attention(q, k, v, key_padding, opt.key_length, opt.kv_rows.defined() ? k.size(0) : -1);
  AttentionOutput res{Tensor::empty({d.b, d.h, d.lq, d.dv}, q.dtype()), Tensor::empty({d.b, d.h, d.lq}, q.dtype())};
  const double scale = opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(d.d));
  dispatch_float("attention", q.dtype(), [&]<typename T>() {
    const std::int32_t* pad = key_padding.defined() ? key_padding.data<std::int32_t>() : nullptr;
    if (d.lq == 1) {  // the causal mask hides nothing from the last query
      forward_one_query_all<T>(q, k, v, pad, res, d, static_cast<T>(scale), kv_rows);
      return;
    }
    ScopedSerialBlas serial;  // parallel over (batch, head); each tile GEMM runs on one thread
#pragma omp parallel
    {
      std::vector<T> s(static_cast<std::size_t>(kTileQ * kTileK));
      std::vector<T> acc(static_cast<std::size_t>(kTileQ * std::max<std::int64_t>(d.dv, 1)));
#pragma omp for schedule(dynamic)
      for (std::int64_t bh = 0; bh < d.b * d.h; ++bh) {
        const std::int64_t kvh = kv_head(bh, d, kv_rows);
        forward_head<T>(q.data<T>() + bh * d.lq * d.d, k.data<T>() + kvh * d.k_rows * d.d,
                        v.data<T>() + kvh * d.k_rows * d.dv, pad ? pad + (kvh / d.h) * d.lk : nullptr,
                        res.out.data<T>() + bh * d.lq * d.dv, res.lse.data<T>() + bh * d.lq, d, opt.causal,
                        static_cast<T>(scale), s, acc);
      }
    }
  });
  return res;
}

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& key_padding, const AttentionOutput& fwd, const AttentionOptions& opt) {
  const Dims d = check_attention(q, k, v, key_padding);
  check_same_shape("attention_backward", dout, fwd.out);
  check_same_dtype("attention_backward", dout, q);
  TESSERA_CHECK(fwd.out.shape() == Shape({d.b, d.h, d.lq, d.dv}) && fwd.lse.shape() == Shape({d.b, d.h, d.lq}),
                "attention_backward: saved out {} / lse {} do not match q {} and v {}", shape_str(fwd.out.shape()),
                shape_str(fwd.lse.shape()), shape_str(q.shape()), shape_str(v.shape()));
  AttentionGrads g{Tensor::empty(q.shape(), q.dtype()), Tensor::empty(k.shape(), q.dtype()),
                   Tensor::empty(v.shape(), q.dtype())};
  const double scale = opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(d.d));
  dispatch_float("attention_backward", q.dtype(), [&]<typename T>() {
    const std::int32_t* pad = key_padding.defined() ? key_padding.data<std::int32_t>() : nullptr;
    ScopedSerialBlas serial;
#pragma omp parallel
    {
      std::vector<T> p(static_cast<std::size_t>(kTileQ * kTileK)), dp(p.size());
      std::vector<T> delta(static_cast<std::size_t>(d.lq));
#pragma omp for schedule(dynamic)
      for (std::int64_t bh = 0; bh < d.b * d.h; ++bh) {
        const std::int64_t b = bh / d.h;
        backward_head<T>(q.data<T>() + bh * d.lq * d.d, k.data<T>() + bh * d.lk * d.d, v.data<T>() + bh * d.lk * d.dv,
                         fwd.out.data<T>() + bh * d.lq * d.dv, dout.data<T>() + bh * d.lq * d.dv,
                         fwd.lse.data<T>() + bh * d.lq, pad ? pad + b * d.lk : nullptr,
                         g.dq.data<T>() + bh * d.lq * d.d, g.dk.data<T>() + bh * d.lk * d.d,
                         g.dv.data<T>() + bh * d.lk * d.dv, d, opt.causal, static_cast<T>(scale), p, dp, delta);
      }
    }
  });
  return g;
}

}  // namespace tessera::cpu
