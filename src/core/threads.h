// Threading: stretch uses OpenMP everywhere (and OpenBLAS built with OpenMP), so one pool serves
// both BLAS and our kernels. Kernels parallelize internally; callers stay single-threaded.
#pragma once

namespace stretch {

// Threads a kernel may use (OMP_NUM_THREADS or all cores).
int NumThreads();
// Sets the threads used by our kernels and by OpenBLAS.
void SetNumThreads(int n);

}  // namespace stretch
