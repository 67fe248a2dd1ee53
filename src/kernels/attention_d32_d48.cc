// The attention kernel for head dimensions 32 and 48 (attention_impl.h says why they have their own
// file).
#include "src/kernels/attention_impl.h"

namespace stretch::attention_internal {

void RunHeadDim32(const Problem& pb) { RunMasked<32>(pb); }
void RunHeadDim48(const Problem& pb) { RunMasked<48>(pb); }

}  // namespace stretch::attention_internal
