// A stand-in for the NVIDIA driver's libcuda.so.1, for tests on machines
// without one: it loads, so a worker looks no further than dlopen to think a
// driver is there, and cudart then finds none of the driver's functions in
// it (cudaErrorInsufficientDriver). Nothing else.
extern "C" const int psync_fake_cuda_driver = 1;
