// Cost-model tests that check the alpha-beta closed forms exactly use a model without
// the gamma (local reduction) term and without the oversubscription term; the tests of
// those terms set them explicitly.
#pragma once

#include "algorithms/select.hpp"

namespace tccl::testing {

inline algo::LinkModel withoutGamma(algo::LinkModel m) {
  m.gammaSecPerByte = 0;
  m.cores = 0;
  return m;
}
inline algo::LinkModel formulaModel() { return withoutGamma(algo::LinkModel{}); }

}  // namespace tccl::testing

using tccl::testing::formulaModel;
using tccl::testing::withoutGamma;
