// The attention kernel for head dimensions 8 and 16 (attention_impl.h says why they have their own
// file).
#include "src/kernels/attention_impl.h"

namespace stretch::attention_internal {

void RunHeadDim8(const Problem& pb) { RunMasked<8>(pb); }
void RunHeadDim16(const Problem& pb) { RunMasked<16>(pb); }

}  // namespace stretch::attention_internal
