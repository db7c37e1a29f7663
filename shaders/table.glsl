// The table as the device stores it (src/scan.rs, DeviceTable), read-only everywhere: binding 0
// the rows, row-major, as STORED (fp32, or fp16 with FP16, widened on load by float()), binding 1
// 1 / |e_x| from float64 (0 for a zero row).
#ifdef FP16
#extension GL_EXT_shader_16bit_storage : require
#define STORED float16_t
#else
#define STORED float
#endif
layout(std430, set = 0, binding = 0) readonly buffer Table { STORED table[]; };
layout(std430, set = 0, binding = 1) readonly buffer InvNorm { float inv_norm[]; };
