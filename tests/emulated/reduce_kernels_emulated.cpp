// cuda_reduce.cu on the block emulation, for the tests of this folder (its own translation unit,
// as the kernel files are on the GPU).
#include "engine/cuda/cuda_reduce.cu"
