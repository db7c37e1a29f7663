#!/usr/bin/env bash
# Builds bench/cm2/cm2_gemm.comp to SPIR-V with a glslang that knows GL_NV_cooperative_matrix2
# (Debian 12's 12.0.0 does not): GLSLANG names it (default: glslang on PATH), OUT the file
# (default .gl/cm2_gemm.spv).
set -euo pipefail
cd "$(dirname "$0")/../.."
GLSLANG=${GLSLANG:-glslang}
OUT=${1:-.gl/cm2_gemm.spv}
"$GLSLANG" -V --target-env vulkan1.3 -o "$OUT" bench/cm2/cm2_gemm.comp
