#pragma once
/// \file
/// `first_order` (`FirstOrderOptions`): the first-order MAML hypergradient (FOMAML; Finn et
/// al., 2017, Sec. 5.2; Nichol et al., 2018). The lower problem starts each unroll from its
/// upper problem's parameters, so d(adapted)/d(initialization) is the identity to first order,
/// and the method hands v = dL_upper/dw to the upper problem unchanged. It needs the two
/// problems' trainable parameters to match one to one in shape (the same model), and is
/// refused otherwise. No second-order product, no re-evaluation of the lower loss.
///
///   problems: {inner: {method: first_order}}

#include <mlo/core/method.h>

#include <memory>
#include <vector>

namespace mlo {
namespace problems {
namespace fewshot {

/// The options of `first_order` (it has none of its own).
struct FirstOrderOptions : MethodOptionsFor<FirstOrderOptions> {
  /// The name configs select it by.
  static constexpr const char* kName = "first_order";
  std::unique_ptr<Hypergradient> make() const override;
};

/// Returns v as the upper problem's hypergradient (file comment).
class FirstOrder : public Hypergradient {
 public:
  std::vector<at::Tensor> apply(const std::vector<at::Tensor>& v, Level& curr,
                                Level& prev) override;
  /// False: the upper problem's parameters need not enter the lower loss (they are where
  /// the lower problem starts).
  bool differentiates_loss() const override { return false; }
  /// Refuses a problem with other than one parent, and parameters that do not match the
  /// parent's one to one in shape.
  void check(const MethodContext& context) const override;
};

}  // namespace fewshot
}  // namespace problems
}  // namespace mlo
