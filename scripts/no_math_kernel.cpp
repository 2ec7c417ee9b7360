// The fused CPU kernels' loads, stores and dtype conversions with the arithmetic taken out, the floor a
// fused step can reach (scripts/bench_optim.py, scripts/kernel_cycles.py): the product's kernel source
// (its loop and dtype dispatch) with one more operator. It is built by those scripts, never shipped with
// the optimizers.
#include "../optim/_cpu_kernels.cpp"

namespace {

// p <- p + g; m <- m + g
void no_math_step(std::vector<at::Tensor> ps, std::vector<at::Tensor> gs, std::vector<at::Tensor> ms) {
  auto vec_fn = [](Vec& x, const Vec& g, Vec& m) { x = x + g; m = m + g; };
  auto scalar_fn = [](float& x, float g, float& m) { x += g; m += g; };
  dispatch(ps, gs, ms, [&](auto* p, auto* g, auto* m, int64_t n) { for_each_element(p, g, m, n, vec_fn, scalar_fn); });
}

}  // namespace

#define NO_MATH_FRAGMENT(ns, m) TORCH_LIBRARY_FRAGMENT(ns, m)

NO_MATH_FRAGMENT(ADAMS_GPT_OPS, m) {
  m.def("no_math_step(Tensor(a!)[] ps, Tensor[] gs, Tensor(b!)[] ms) -> ()");
}

ADAMS_GPT_LIBRARY_IMPL(ADAMS_GPT_OPS, CPU, m) {
  m.impl("no_math_step", no_math_step);
}
