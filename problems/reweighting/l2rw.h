#pragma once
/// \file
/// Learning to Reweight (M. Ren, W. Zeng, B. Yang, R. Urtasun, "Learning to Reweight Examples
/// for Robust Deep Learning", ICML 2018, arXiv:1803.09050), Eqs. (9)-(11): per-sample weights
/// from a one-step look-ahead, with no weight net.
///
/// With the training loss sum_i eps_i l_i(w) and one SGD step w' = w - lr sum_i eps_i grad l_i(w),
/// the meta loss's derivative at eps = 0 is dL_meta(w')/deps_i = -lr grad l_i(w) . grad L_meta(w).
/// The weights are its negative part, clamped and normalized:
///
///   u_i = max(grad l_i(w) . v, 0),  v = grad L_meta(w),   w_i = u_i / sum_j u_j  (0 if all are 0).
///
/// The per-sample directional derivatives d_i = grad l_i . v are taken by a central difference
/// of the per-sample losses along v (two forwards, no per-sample gradients):
///   d_i ~ (l_i(w + h v) - l_i(w - h v)) / (2h),   h = alpha / |v|.

#include <mlo/core/batch.h>
#include <mlo/core/problem.h>

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace mlo {
namespace problems {
namespace reweighting {

/// The L2RW weights [N] of `train`'s samples for a model `logits(x)` with trainable `params`,
/// judged by the mean cross-entropy on `meta`. `params` are perturbed in place and restored bit
/// for bit; the caller restores buffers (batch-norm statistics) if the forwards may write them.
/// `owner`: the problem whose trainable parameters `params` are, when a problem's are (under
/// zero3 each rank holds a slice of them, and the meta gradient's norm is summed over the ranks:
/// `mlo::squared_norm`). Throws `mlo::Error` if alpha <= 0.
at::Tensor l2rw_weights(const std::function<at::Tensor(const at::Tensor&)>& logits,
                        const std::vector<at::Tensor>& params, const Batch& train,
                        const Batch& meta, double alpha = 0.01, const Problem* owner = nullptr);

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
