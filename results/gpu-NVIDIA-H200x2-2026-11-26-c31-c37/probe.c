/* start-up probe: what each CUDA start-up call costs on this host (not part of gputrain) */
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static double t0;
static void mark(const char*w){static double last;double n=now();printf("%-34s %8.1f ms (at %7.1f)\n",w,(n-(last?last:t0))*1e3,(n-t0)*1e3);last=n;}
int main(void){
  t0=now();
  int n; cudaGetDeviceCount(&n); mark("cudaGetDeviceCount (driver)");
  struct cudaDeviceProp p; cudaGetDeviceProperties(&p,0); mark("cudaGetDeviceProperties");
  cudaSetDevice(0); cudaFree(0); mark("cudaSetDevice+cudaFree(0) context");
  cudaStream_t s; cudaStreamCreateWithFlags(&s,cudaStreamNonBlocking); mark("stream");
  void*d; cudaMalloc(&d,64<<20); mark("cudaMalloc 64 MB");
  void*h; cudaHostAlloc(&h,48<<20,cudaHostAllocDefault); mark("cudaHostAlloc 48 MB");
  void*r=malloc(48<<20); for(size_t i=0;i<(48u<<20);i+=4096)((char*)r)[i]=1; mark("malloc+touch 48 MB");
  cudaHostRegister(r,48<<20,cudaHostRegisterDefault); mark("cudaHostRegister 48 MB");
  cublasHandle_t b; cublasCreate(&b); mark("cublasCreate");
  cudnnHandle_t c; cudnnCreate(&c); mark("cudnnCreate");
  cudaStream_t s2; cudaStreamCreateWithFlags(&s2,cudaStreamNonBlocking); mark("second stream");
  cudaHostUnregister(r); mark("cudaHostUnregister 48 MB");
  cudaFreeHost(h); mark("cudaFreeHost 48 MB");
  return 0;
}
