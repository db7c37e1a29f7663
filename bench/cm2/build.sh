#!/usr/bin/env bash
# Builds bench/cm2/cm2_gemm.comp to SPIR-V with a glslang that knows GL_NV_cooperative_matrix2
# (Debian 12's 12.0.0 does not), and cm2_stream.comp beside it. GLSLANG names the compiler
# (default: glslang on PATH); the first argument names the output (default .gl/cm2_gemm.spv).
# The probe's runs used glslang 16.5.0 built from KhronosGroup/glslang 90afccf, standalone only
# (about 1.5 minutes on 2 cores):
#   pip install --user cmake ninja
#   cmake -S glslang -B glslang/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DENABLE_OPT=OFF \
#     -DGLSLANG_TESTS=OFF -DBUILD_TESTING=OFF -DENABLE_HLSL=OFF
#   cmake --build glslang/build --target glslang-standalone   # → glslang/build/StandAlone/glslang
set -euo pipefail
cd "$(dirname "$0")/../.."
GLSLANG=${GLSLANG:-glslang}
OUT=${1:-.gl/cm2_gemm.spv}
"$GLSLANG" -V --target-env vulkan1.3 -o "$OUT" bench/cm2/cm2_gemm.comp
# The streaming half that follows EPI 9 / 10 (plain GLSL): beside it, named cm2_stream.spv.
"$GLSLANG" -V --target-env vulkan1.3 -o "$(dirname "$OUT")/cm2_stream.spv" bench/cm2/cm2_stream.comp
