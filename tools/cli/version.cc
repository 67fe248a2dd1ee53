// The commit this stretch was built from (`stretch --version`; cmake/build_id.cmake writes it at
// every build, so that only this file recompiles when it changes).
#include "stretch_build_id.h"
#include "tools/cli/common.h"

namespace stretch::cli {

const char* BuildId() { return STRETCH_BUILD_ID; }

}  // namespace stretch::cli
