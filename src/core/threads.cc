#include "src/core/threads.h"

#include <cblas.h>
#include <omp.h>

namespace stretch {

int NumThreads() { return omp_get_max_threads(); }

void SetNumThreads(int n) {
  if (n < 1) n = 1;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

}  // namespace stretch
