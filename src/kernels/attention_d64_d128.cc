// The attention kernel for head dimensions 64 and 128 (attention_impl.h says why they have their own
// file).
#include "src/kernels/attention_impl.h"

namespace stretch::attention_internal {

void RunHeadDim64(const Problem& pb) { RunMasked<64>(pb); }
void RunHeadDim128(const Problem& pb) { RunMasked<128>(pb); }

}  // namespace stretch::attention_internal
