// Cost-model tests that check the alpha-beta closed forms exactly use a model without
// the gamma (local reduction) term, without the oversubscription term and with hd's
// penalty at every size; the tests of those terms set them explicitly.
#pragma once

#include "algorithms/select.hpp"

namespace tccl::testing {

inline algo::LinkModel withoutGamma(algo::LinkModel m) {
  m.gammaSecPerByte = 0;
  m.cores = 0;
  m.hdPenaltyFromBytes = 0;  // the penalty at every size, as the formulas assume
  return m;
}
inline algo::LinkModel formulaModel() { return withoutGamma(algo::LinkModel{}); }

}  // namespace tccl::testing

using tccl::testing::formulaModel;
using tccl::testing::withoutGamma;
