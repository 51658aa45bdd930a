// The C++ templates of the CUDA runtime API that cuda_runtime.h declares only for nvcc
// (under __CUDACC__), for kernel sources compiled by the emulation: they take a kernel as a
// function pointer and forward to the C API, as the real templates do.
#pragma once
#include <cuda_runtime_api.h>

template <class T>
inline cudaError_t cudaFuncSetAttribute(T* func, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(func), attr, value);
}

template <class T>
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, T* func) {
  return ::cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(func));
}
