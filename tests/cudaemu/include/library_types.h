/* cudaemu stand-in (tests/cudaemu/README.md): the data types of the CUDA
   libraries that jizhi's CUDA code names, with the CUDA toolkit's values. */
#ifndef JZ_CUDAEMU_LIBRARY_TYPES_H
#define JZ_CUDAEMU_LIBRARY_TYPES_H
typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16F = 2,
    CUDA_R_8I = 3,
    CUDA_R_32I = 10,
    CUDA_R_16BF = 14
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;
#endif
