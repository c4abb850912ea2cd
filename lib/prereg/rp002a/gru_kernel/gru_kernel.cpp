// Single-layer batch-first GRU: the whole time loop (forward and backward
// through time) in C++, CPU only. Same equations and gate order (r, z, n) as
// torch.nn.GRU:
//
//   r_t = sigmoid(W_ir x_t + b_ir + W_hr h_{t-1} + b_hr)
//   z_t = sigmoid(W_iz x_t + b_iz + W_hz h_{t-1} + b_hz)
//   q_t = W_hn h_{t-1} + b_hn
//   n_t = tanh(W_in x_t + b_in + r_t * q_t)
//   h_t = (h_{t-1} - n_t) * z_t + n_t            (= (1 - z_t) n_t + z_t h_{t-1})
//
// The per-step products (h W_hh^T forward, d W_hh backward) use a small
// register-blocked GEMM below (no dispatch; every element one multiply-add chain
// over k in order, fused where the CPU has FMA); the all-steps products go through ATen (MKL). The gate
// arithmetic is a plain loop the compiler vectorises. float32 uses a Cephes-style
// exp (about 1 ulp) so that the loop vectorises; tanh(a) = 2 sigmoid(2a) - 1 as
// in prereg.rp002a.fused_gru. float64 uses std::exp / std::tanh. Every loop runs
// in a fixed order on one thread, so results are deterministic bit for bit.
//
// Ops (namespace prereg_gru):
//   forward(x[B,T,I], h0[B,H], w_ih[3H,I], w_hh[3H,H], b_ih[3H], b_hh[3H], save)
//     -> (out[B,T,H], h_last[B,H], gates[B,T,4H] = (r,z,n,q), h_prev[B,T,H])
//     (gates and h_prev are empty unless save)
//   backward(grad_out[B,T,H], grad_last[B,H], x, h0, w_ih, w_hh, gates, h_prev,
//            need_grad_x)
//     -> (grad_x, grad_h0, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh)
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>

namespace {

// exp(x) for float: Cephes expf (range reduction by ln 2, degree-5 polynomial,
// scaling by 2^n built from its bits). |x| is clamped to 87 so 2^n stays normal;
// exp(+-87) is beyond what sigmoid/tanh can resolve in float32. n is rounded to
// nearest with the 1.5 * 2^23 trick (std::floor does not vectorise without
// -fno-trapping-math). Built with -ffp-contract=off, so every operation is one
// IEEE rounding and vector and scalar iterations give identical bits.
inline float exp_f32(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 87.0f ? 87.0f : x;
  const float fx = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - fx * 0.693359375f;
  r = r - fx * -2.12194440e-4f;
  const float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r2 + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(fx) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

inline float sigmoid_t(float a) { return 1.0f / (1.0f + exp_f32(-a)); }
inline float tanh_t(float a) { return 2.0f * sigmoid_t(2.0f * a) - 1.0f; }
inline double sigmoid_t(double a) { return 1.0 / (1.0 + std::exp(-a)); }
inline double tanh_t(double a) { return std::tanh(a); }

#ifdef __FMA__
template <typename T>
inline T madd(T a, T b, T c) { return std::fma(a, b, c); }  // one rounding, vectorised
#else
template <typename T>
inline T madd(T a, T b, T c) { return a * b + c; }
#endif

// Rows [m, m + R) of C = A Bt (+ C if Accumulate): A rows at stride lda, Bt
// contiguous [K, N], C rows at stride ldc. Column blocks of NB stay in
// registers; every C element is the same multiply-add chain over k = 0..K-1
// whatever block or tail computes it, so the result does not depend on blocking.
template <typename T, int R, bool Accumulate>
inline void gemm_rows(int64_t m, int64_t N, int64_t K, const T* __restrict__ A, int64_t lda,
                      const T* __restrict__ Bt, T* __restrict__ C, int64_t ldc) {
  constexpr int NB = 32;
  int64_t jb = 0;
  for (; jb + NB <= N; jb += NB) {
    T acc[R][NB];
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < NB; ++j) {
        acc[r][j] = Accumulate ? C[(m + r) * ldc + jb + j] : T(0);
      }
    }
    for (int64_t k = 0; k < K; ++k) {
      const T* __restrict__ w = Bt + k * N + jb;
      for (int r = 0; r < R; ++r) {
        const T a = A[(m + r) * lda + k];
        for (int j = 0; j < NB; ++j) {
          acc[r][j] = madd(a, w[j], acc[r][j]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < NB; ++j) {
        C[(m + r) * ldc + jb + j] = acc[r][j];
      }
    }
  }
  for (int64_t j = jb; j < N; ++j) {
    for (int r = 0; r < R; ++r) {
      T acc = Accumulate ? C[(m + r) * ldc + j] : T(0);
      for (int64_t k = 0; k < K; ++k) {
        acc = madd(A[(m + r) * lda + k], Bt[k * N + j], acc);
      }
      C[(m + r) * ldc + j] = acc;
    }
  }
}

// C[M, N] = A[M, K] Bt[K, N] (+ C if Accumulate), for the small per-step
// products (M = batch, K and N multiples of H): no dispatch, B kept in cache.
template <typename T, bool Accumulate>
void small_gemm(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* Bt, T* C,
                int64_t ldc) {
  constexpr int R = 8;
  int64_t m = 0;
  for (; m + R <= M; m += R) gemm_rows<T, R, Accumulate>(m, N, K, A, lda, Bt, C, ldc);
  for (; m < M; ++m) gemm_rows<T, 1, Accumulate>(m, N, K, A, lda, Bt, C, ldc);
}

// One row (one batch element) of a forward step.
template <typename T, bool Save>
inline void forward_row(int64_t H, const T* __restrict__ gi, const T* __restrict__ gh,
                        const T* __restrict__ b_hh, const T* __restrict__ h_prev,
                        T* __restrict__ h_out, T* __restrict__ gates,
                        T* __restrict__ h_prev_save) {
  for (int64_t j = 0; j < H; ++j) {
    const T r = sigmoid_t(gi[j] + gh[j] + b_hh[j]);
    const T z = sigmoid_t(gi[H + j] + gh[H + j] + b_hh[H + j]);
    const T q = gh[2 * H + j] + b_hh[2 * H + j];
    const T n = tanh_t(gi[2 * H + j] + r * q);
    const T hp = h_prev[j];
    h_out[j] = (hp - n) * z + n;
    if (Save) {
      gates[j] = r;
      gates[H + j] = z;
      gates[2 * H + j] = n;
      gates[3 * H + j] = q;
      h_prev_save[j] = hp;
    }
  }
}

// One row of a backward step. g = dL/dh_t (carry + direct); writes the
// pre-activation gradients and overwrites carry with g * z (the direct part of
// dL/dh_{t-1}; the W_hh part is added by a GEMM afterwards).
template <typename T>
inline void backward_row(int64_t H, T* __restrict__ carry, const T* __restrict__ grad_out,
                         const T* __restrict__ gates, const T* __restrict__ h_prev,
                         T* __restrict__ d_in, T* __restrict__ d_hid) {
  for (int64_t j = 0; j < H; ++j) {
    const T g = carry[j] + grad_out[j];
    const T r = gates[j];
    const T z = gates[H + j];
    const T n = gates[2 * H + j];
    const T q = gates[3 * H + j];
    const T one = T(1);
    const T d_an = g * (one - z) * (one - n * n);
    const T d_az = g * (h_prev[j] - n) * z * (one - z);
    const T d_q = d_an * r;
    const T d_ar = d_q * q * (one - r);
    d_in[j] = d_ar;
    d_in[H + j] = d_az;
    d_in[2 * H + j] = d_an;
    d_hid[j] = d_ar;
    d_hid[H + j] = d_az;
    d_hid[2 * H + j] = d_q;
    carry[j] = g * z;
  }
}

// Shapes, dtype, device and layout of the tensors both ops take; the Python
// wrapper has already refused bad input with a clear message, so these guard
// direct calls of the ops only.
void check_core(const at::Tensor& x, const at::Tensor& h0, const at::Tensor& w_ih,
                const at::Tensor& w_hh) {
  TORCH_CHECK(x.dim() == 3, "x must be (B, T, I)");
  TORCH_CHECK(w_hh.dim() == 2 && w_hh.size(0) == 3 * w_hh.size(1), "w_hh must be (3H, H)");
  const int64_t B = x.size(0), I = x.size(2), H = w_hh.size(1);
  TORCH_CHECK(x.size(1) >= 1 && B >= 1, "x must have B >= 1 and T >= 1");
  TORCH_CHECK(h0.dim() == 2 && h0.size(0) == B && h0.size(1) == H, "h0 must be (B, H)");
  TORCH_CHECK(w_ih.dim() == 2 && w_ih.size(0) == 3 * H && w_ih.size(1) == I,
              "w_ih must be (3H, I)");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble,
              "the compiled GRU supports float32 and float64");
  for (const at::Tensor* t : {&x, &h0, &w_ih, &w_hh}) {
    TORCH_CHECK(t->device().is_cpu(), "the compiled GRU is CPU only");
    TORCH_CHECK(t->is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(t->scalar_type() == x.scalar_type(), "inputs must share x's dtype");
  }
}

void check_bias(const at::Tensor& bias, const at::Tensor& x, int64_t H) {
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == 3 * H, "biases must be (3H,)");
  TORCH_CHECK(bias.device().is_cpu() && bias.is_contiguous(), "biases: contiguous CPU");
  TORCH_CHECK(bias.scalar_type() == x.scalar_type(), "biases must share x's dtype");
}

template <typename T>
void forward_loop(const at::Tensor& gi, const at::Tensor& h0, const at::Tensor& w_hh,
                  const at::Tensor& b_hh, at::Tensor& out, at::Tensor& gates,
                  at::Tensor& h_prev, bool save) {
  const int64_t B = out.size(0), S = out.size(1), H = out.size(2);
  at::Tensor gh = at::empty({B, 3 * H}, out.options());
  const at::Tensor w_hh_t = w_hh.t().contiguous();  // [H, 3H]
  const T* wt_p = w_hh_t.data_ptr<T>();
  const T* gi_p = gi.data_ptr<T>();
  const T* h0_p = h0.data_ptr<T>();
  const T* bhh_p = b_hh.data_ptr<T>();
  T* out_p = out.data_ptr<T>();
  T* gh_p = gh.data_ptr<T>();
  T* gates_p = save ? gates.data_ptr<T>() : nullptr;
  T* hprev_p = save ? h_prev.data_ptr<T>() : nullptr;
  for (int64_t t = 0; t < S; ++t) {
    // gh = h_{t-1} W_hh^T; h_{t-1} rows: h0, or column t-1 of out (row stride S*H)
    if (t == 0) {
      small_gemm<T, false>(B, 3 * H, H, h0_p, H, wt_p, gh_p, 3 * H);
    } else {
      small_gemm<T, false>(B, 3 * H, H, out_p + (t - 1) * H, S * H, wt_p, gh_p, 3 * H);
    }
    for (int64_t b = 0; b < B; ++b) {
      const T* hp_row = t == 0 ? h0_p + b * H : out_p + (b * S + t - 1) * H;
      const int64_t row = b * S + t;
      if (save) {
        forward_row<T, true>(H, gi_p + row * 3 * H, gh_p + b * 3 * H, bhh_p, hp_row,
                             out_p + row * H, gates_p + row * 4 * H, hprev_p + row * H);
      } else {
        forward_row<T, false>(H, gi_p + row * 3 * H, gh_p + b * 3 * H, bhh_p, hp_row,
                              out_p + row * H, nullptr, nullptr);
      }
    }
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_forward(
    const at::Tensor& x, const at::Tensor& h0, const at::Tensor& w_ih, const at::Tensor& w_hh,
    const at::Tensor& b_ih, const at::Tensor& b_hh, bool save) {
  check_core(x, h0, w_ih, w_hh);
  const int64_t B = x.size(0), S = x.size(1), I = x.size(2), H = w_hh.size(1);
  check_bias(b_ih, x, H);
  check_bias(b_hh, x, H);
  // input projections of every (b, t) row at once: [B*T, 3H] = x W_ih^T + b_ih
  const at::Tensor gi = at::addmm(b_ih, x.view({B * S, I}), w_ih.t());
  at::Tensor out = at::empty({B, S, H}, x.options());
  at::Tensor gates = save ? at::empty({B, S, 4 * H}, x.options()) : at::empty({0}, x.options());
  at::Tensor h_prev = save ? at::empty({B, S, H}, x.options()) : at::empty({0}, x.options());
  if (x.scalar_type() == at::kFloat) {
    forward_loop<float>(gi, h0, w_hh, b_hh, out, gates, h_prev, save);
  } else {
    forward_loop<double>(gi, h0, w_hh, b_hh, out, gates, h_prev, save);
  }
  at::Tensor h_last = out.select(1, S - 1).clone();
  return {out, h_last, gates, h_prev};
}

template <typename T>
void backward_loop(const at::Tensor& grad_out, at::Tensor& carry, const at::Tensor& w_hh,
                   const at::Tensor& gates, const at::Tensor& h_prev, at::Tensor& d_in,
                   at::Tensor& d_hid) {
  const int64_t B = grad_out.size(0), S = grad_out.size(1), H = grad_out.size(2);
  const T* go_p = grad_out.data_ptr<T>();
  const T* gates_p = gates.data_ptr<T>();
  const T* hprev_p = h_prev.data_ptr<T>();
  T* carry_p = carry.data_ptr<T>();
  T* din_p = d_in.data_ptr<T>();
  T* dhid_p = d_hid.data_ptr<T>();
  const T* w_p = w_hh.data_ptr<T>();  // [3H, H]
  for (int64_t t = S - 1; t >= 0; --t) {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t row = b * S + t;
      backward_row<T>(H, carry_p + b * H, go_p + row * H, gates_p + row * 4 * H,
                      hprev_p + row * H, din_p + row * 3 * H, dhid_p + row * 3 * H);
    }
    // carry = g_t * z_t + [d a_r, d a_z, d q]_t W_hh  (= dL/dh_{t-1} minus its direct part)
    small_gemm<T, true>(B, H, 3 * H, dhid_p + t * 3 * H, S * 3 * H, w_p, carry_p, H);
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_backward(
    const at::Tensor& grad_out, const at::Tensor& grad_last, const at::Tensor& x,
    const at::Tensor& h0, const at::Tensor& w_ih, const at::Tensor& w_hh,
    const at::Tensor& gates, const at::Tensor& h_prev, bool need_grad_x) {
  check_core(x, h0, w_ih, w_hh);
  const int64_t B = x.size(0), S = x.size(1), I = x.size(2), H = w_hh.size(1);
  TORCH_CHECK(grad_out.sizes() == at::IntArrayRef({B, S, H}) && grad_out.is_contiguous(),
              "grad_out must be contiguous (B, T, H)");
  TORCH_CHECK(grad_last.sizes() == at::IntArrayRef({B, H}) && grad_last.is_contiguous(),
              "grad_last must be contiguous (B, H)");
  TORCH_CHECK(gates.sizes() == at::IntArrayRef({B, S, 4 * H}) && gates.is_contiguous(),
              "gates must come from forward(save=True)");
  TORCH_CHECK(h_prev.sizes() == at::IntArrayRef({B, S, H}) && h_prev.is_contiguous(),
              "h_prev must come from forward(save=True)");
  for (const at::Tensor* t : {&grad_out, &grad_last, &gates, &h_prev}) {
    TORCH_CHECK(t->scalar_type() == x.scalar_type(), "gradients must share x's dtype");
  }
  at::Tensor carry = grad_last.clone();  // dL/dh_{T-1} beyond grad_out
  at::Tensor d_in = at::empty({B, S, 3 * H}, x.options());
  at::Tensor d_hid = at::empty({B, S, 3 * H}, x.options());
  if (x.scalar_type() == at::kFloat) {
    backward_loop<float>(grad_out, carry, w_hh, gates, h_prev, d_in, d_hid);
  } else {
    backward_loop<double>(grad_out, carry, w_hh, gates, h_prev, d_in, d_hid);
  }
  const at::Tensor d_in_rows = d_in.view({B * S, 3 * H});
  const at::Tensor d_hid_rows = d_hid.view({B * S, 3 * H});
  const at::Tensor x_rows = x.view({B * S, I});
  at::Tensor grad_x = need_grad_x ? at::mm(d_in_rows, w_ih).view({B, S, I})
                                  : at::empty({0}, x.options());
  // (x^T D)^T: a thin x makes D^T x slow
  at::Tensor grad_w_ih = at::mm(x_rows.t(), d_in_rows).t().contiguous();
  at::Tensor grad_w_hh = at::mm(d_hid_rows.t(), h_prev.view({B * S, H}));
  at::Tensor grad_b_ih = d_in_rows.sum(0);
  at::Tensor grad_b_hh = d_hid_rows.sum(0);
  return {grad_x, carry, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh};
}

}  // namespace

TORCH_LIBRARY(prereg_gru, m) {
  m.def("forward", &gru_forward);
  m.def("backward", &gru_backward);
}
