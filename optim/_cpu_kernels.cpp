// AdamS and Lion on CPU, one pass over memory: read p, g, m once, write p, m once, fp32 math
// whatever the storage dtype (float32, bfloat16, float16). The same update rules as
// adams_update / lion_update in optim/adams.py and optim/lion.py (AdamS's with its scalars
// folded, so it agrees to fp32 rounding, not bit for bit). Compiled at first use by
// optim/_cpu_fused.py (torch.utils.cpp_extension), which names the operator library with
// -DADAMS_GPT_OPS=<name>; Python calls them as torch.ops.<name>.adams_step and so on.
//
// Why not the torch.compile kernel on CPU: its step scalars (lr, betas, ...) live in 0-d
// tensors so that a new learning rate does not recompile, and the generated loop reloads them
// at every vector, since its stores to p and m might alias them. Here they are values.

// The dispatcher's registration header rather than torch/extension.h with pybind11: the latter
// pulls in all of libtorch's C++ frontend and builds several times slower.
#include <ATen/core/Tensor.h>
#include <torch/library.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/cpu/vec/functional.h>  // convert_to_float / convert_from_float for BFloat16 and Half

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int64_t kGrain = 1 << 15;  // elements per task: small tensors run on one thread

// Ask for the cache lines 2 KiB past the ones each loop iteration reads: the hardware prefetcher
// alone keeps too few lines in flight once each line carries the update's arithmetic (measured in
// results/cpu/README.md). A prefetch never faults, so asking past a tensor's end is harmless; the
// address is formed as an integer to keep that defined.
constexpr uintptr_t kAhead = 2048;
inline void prefetch_ahead(const void* ptr) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(ptr) + kAhead), 0, 3);
#endif
}

#if defined(CPU_CAPABILITY_AVX2)
// bfloat16 on AVX2 without crossing the 128-bit halves of a register. at::vec's conversions
// widen 8 values at a time (vpmovzxwd, one of them after a lane extract) and narrow with a pack
// and a lane permute; together they made the bf16 step slower than its arithmetic. Here 16
// values load as two float vectors, the even-indexed ones (shifted into the high half of each
// 32-bit lane) and the odd-indexed ones (masked in place), and store back by one blend. The
// rounding is to nearest, ties to even, as torch's: bit for bit the same bf16 for every finite
// float, overflow to inf included. torch's NaN check is left out: a NaN these kernels compute either
// carries a bf16 input's payload or is x86's default NaN (0xffc00000), so its low 16 bits are zero
// and it rounds to itself.
inline void load_bf16(const at::BFloat16* src, Vec& even, Vec& odd) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  even = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
  odd = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

inline __m256i round_to_bf16_bits(const Vec& v) {  // the rounded value sits in the high 16 bits
  const __m256i x = _mm256_castps_si256(v);
  const __m256i odd_lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  return _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd_lsb);
}

inline void store_bf16(at::BFloat16* dst, const Vec& even, const Vec& odd) {
  const __m256i out = _mm256_blend_epi16(_mm256_srli_epi32(round_to_bf16_bits(even), 16), round_to_bf16_bits(odd), 0xAA);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), out);
}
#elif defined(CPU_CAPABILITY_AVX512)
// The same even/odd split and rounding on AVX-512, 32 values a step. at::vec's AVX-512
// conversions widen and narrow through lane-crossing moves as its AVX2 ones do, and with them the
// bf16 AdamS step took 0.82-0.84x torch's fused AdamW against a 0.53-0.56x floor (2-core Xeon VM).
inline void load_bf16(const at::BFloat16* src, Vec& even, Vec& odd) {
  const __m512i x = _mm512_loadu_si512(src);
  even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
  odd = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

inline __m512i round_to_bf16_bits(const Vec& v) {  // the rounded value sits in the high 16 bits
  const __m512i x = _mm512_castps_si512(v);
  const __m512i odd_lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), odd_lsb);
}

inline void store_bf16(at::BFloat16* dst, const Vec& even, const Vec& odd) {
  const __m512i out = _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(round_to_bf16_bits(even), 16),
                                              round_to_bf16_bits(odd));
  _mm512_storeu_si512(dst, out);
}
#endif

// Apply f(x, g, m) -> (x, m), on Vec and on float, over one tensor of storage type T.
template <typename T, typename VecFn, typename ScalarFn>
void for_each_element(T* p, const T* g, T* m, int64_t n, VecFn vec_fn, ScalarFn scalar_fn) {
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    int64_t i = begin;
#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
    if constexpr (std::is_same_v<T, at::BFloat16>) {  // even- and odd-indexed halves, as above
      for (; i + 2 * Vec::size() <= end; i += 2 * Vec::size()) {
        Vec x0, x1, g0, g1, m0, m1;
        prefetch_ahead(p + i), prefetch_ahead(g + i), prefetch_ahead(m + i);
        load_bf16(p + i, x0, x1);
        load_bf16(g + i, g0, g1);
        load_bf16(m + i, m0, m1);
        vec_fn(x0, g0, m0);
        vec_fn(x1, g1, m1);
        store_bf16(p + i, x0, x1);
        store_bf16(m + i, m0, m1);
      }
    } else
#endif
    if constexpr (std::is_same_v<T, float>) {
      for (; i + Vec::size() <= end; i += Vec::size()) {
        Vec x = Vec::loadu(p + i), gv = Vec::loadu(g + i), mv = Vec::loadu(m + i);
        prefetch_ahead(p + i), prefetch_ahead(g + i), prefetch_ahead(m + i);
        vec_fn(x, gv, mv);
        x.store(p + i);
        mv.store(m + i);
      }
    } else {  // other 16-bit storage: two float vectors per 16-bit vector
      using VecT = at::vec::Vectorized<T>;
      for (; i + VecT::size() <= end; i += VecT::size()) {
        prefetch_ahead(p + i), prefetch_ahead(g + i), prefetch_ahead(m + i);
        auto [x0, x1] = at::vec::convert_to_float<T>(VecT::loadu(p + i));
        auto [g0, g1] = at::vec::convert_to_float<T>(VecT::loadu(g + i));
        auto [m0, m1] = at::vec::convert_to_float<T>(VecT::loadu(m + i));
        vec_fn(x0, g0, m0);
        vec_fn(x1, g1, m1);
        at::vec::convert_from_float<T>(x0, x1).store(p + i);
        at::vec::convert_from_float<T>(m0, m1).store(m + i);
      }
    }
    for (; i < end; ++i) {
      float x = static_cast<float>(p[i]), gv = static_cast<float>(g[i]), mv = static_cast<float>(m[i]);
      scalar_fn(x, gv, mv);
      p[i] = static_cast<T>(x);
      m[i] = static_cast<T>(mv);
    }
  });
}

template <typename Fn>
void dispatch(const std::vector<at::Tensor>& ps, const std::vector<at::Tensor>& gs, const std::vector<at::Tensor>& ms,
              Fn fn) {
  TORCH_CHECK(ps.size() == gs.size() && ps.size() == ms.size(), "params, grads and momenta must pair up");
  for (size_t t = 0; t < ps.size(); ++t) {
    const auto& p = ps[t];
    TORCH_CHECK(p.is_contiguous() && gs[t].is_contiguous() && ms[t].is_contiguous(), "tensors must be contiguous");
    TORCH_CHECK(gs[t].scalar_type() == p.scalar_type() && ms[t].scalar_type() == p.scalar_type(),
                "param, grad and momentum must share a dtype");
    switch (p.scalar_type()) {
      case at::kFloat:
        fn(p.data_ptr<float>(), gs[t].data_ptr<float>(), ms[t].data_ptr<float>(), p.numel());
        break;
      case at::kBFloat16:
        fn(p.data_ptr<at::BFloat16>(), gs[t].data_ptr<at::BFloat16>(), ms[t].data_ptr<at::BFloat16>(), p.numel());
        break;
      case at::kHalf:
        fn(p.data_ptr<at::Half>(), gs[t].data_ptr<at::Half>(), ms[t].data_ptr<at::Half>(), p.numel());
        break;
      default:
        TORCH_CHECK(false, "fused CPU kernels take float32, bfloat16 or float16, got ", p.scalar_type());
    }
  }
}

}  // namespace

// p <- p(1 - lr wd); v <- b2 (m/bc)^2 + (1 - b2) g^2; m <- b1 m + (1 - b1) g; p <- p - lr (m/bc) / (sqrt(v) + eps),
// with the scalars folded so that each element costs three multiplies fewer: with c2 = 1 - b2 > 0, v = c2 s where
// s = k m^2 + g^2 and k = b2 / (bc^2 c2), so (m_new/bc) / (sqrt(v) + eps) = m_new / (bc sqrt(c2)) / (sqrt(s) + eps / sqrt(c2)).
void adams_step(std::vector<at::Tensor> ps, std::vector<at::Tensor> gs, std::vector<at::Tensor> ms, double lr,
                double weight_decay, double beta1, double beta2, double eps, double inv_bc) {
  TORCH_CHECK(beta2 < 1.0, "AdamS needs beta2 < 1, got ", beta2);
  const double root_c2 = std::sqrt(1.0 - beta2);
  const float decay = static_cast<float>(1.0 - lr * weight_decay), c1 = static_cast<float>(1.0 - beta1),
              k = static_cast<float>(beta2 * inv_bc * inv_bc / (1.0 - beta2)),
              step = static_cast<float>(lr * inv_bc / root_c2), e = static_cast<float>(eps / root_c2);
  const Vec vdecay(decay), vc1(c1), vk(k), vstep(step), ve(e);
  auto vec_fn = [&](Vec& x, const Vec& g, Vec& m) {
    Vec s = at::vec::fmadd(vk * m, m, g * g);
    m = at::vec::fmadd(vc1, g - m, m);  // not b1 m + c1 g: a subtraction keeps the multiply ports free
    x = at::vec::fmsub(x, vdecay, vstep * m / (s.sqrt() + ve));
  };
  auto scalar_fn = [&](float& x, float g, float& m) {
    float s = std::fma(k * m, m, g * g);
    m = std::fma(c1, g - m, m);
    x = std::fma(x, decay, -(step * m / (std::sqrt(s) + e)));
  };
  dispatch(ps, gs, ms, [&](auto* p, auto* g, auto* m, int64_t n) { for_each_element(p, g, m, n, vec_fn, scalar_fn); });
}

// c <- b1 m + (1 - b1) g; p <- p(1 - lr wd) - lr sign(c); m <- b2 m + (1 - b2) g, written as lion_update and
// lion-pytorch write them (not m + (1 - b) (g - m): after an infinite gradient m is infinite, and g - m then
// makes the momentum NaN where theirs stays infinite)
void lion_step(std::vector<at::Tensor> ps, std::vector<at::Tensor> gs, std::vector<at::Tensor> ms, double lr,
               double weight_decay, double beta1, double beta2) {
  const float decay = static_cast<float>(1.0 - lr * weight_decay), l = static_cast<float>(lr),
              b1 = static_cast<float>(beta1), c1 = static_cast<float>(1.0 - beta1), b2 = static_cast<float>(beta2),
              c2 = static_cast<float>(1.0 - beta2);
  const Vec vdecay(decay), vl(l), vb1(b1), vc1(c1), vb2(b2), vc2(c2), zero(0.0f);
  auto vec_fn = [&](Vec& x, const Vec& g, Vec& m) {
    Vec c = at::vec::fmadd(vb1, m, vc1 * g);
    x = at::vec::fmsub(x, vdecay, vl * (c.gt(zero) - c.lt(zero)));  // sign(NaN) = 0, as torch.sign's
    m = at::vec::fmadd(vb2, m, vc2 * g);
  };
  auto scalar_fn = [&](float& x, float g, float& m) {
    float c = m * b1 + g * c1;
    x = x * decay - l * static_cast<float>((c > 0.0f) - (c < 0.0f));
    m = m * b2 + g * c2;
  };
  dispatch(ps, gs, ms, [&](auto* p, auto* g, auto* m, int64_t n) { for_each_element(p, g, m, n, vec_fn, scalar_fn); });
}

// Tensor(a!)[]: the kernels write p and m in place, which the schema says so that nothing
// (torch.compile, functionalization) takes the call for a pure function.
#define ADAMS_GPT_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)  // expands ADAMS_GPT_OPS before TORCH_LIBRARY pastes it
#define ADAMS_GPT_LIBRARY_IMPL(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)

ADAMS_GPT_LIBRARY(ADAMS_GPT_OPS, m) {
  m.def("adams_step(Tensor(a!)[] ps, Tensor[] gs, Tensor(b!)[] ms, float lr, float weight_decay, float beta1, "
        "float beta2, float eps, float inv_bc) -> ()");
  m.def("lion_step(Tensor(a!)[] ps, Tensor[] gs, Tensor(b!)[] ms, float lr, float weight_decay, float beta1, "
        "float beta2) -> ()");
}

ADAMS_GPT_LIBRARY_IMPL(ADAMS_GPT_OPS, CPU, m) {
  m.impl("adams_step", adams_step);
  m.impl("lion_step", lion_step);
}
