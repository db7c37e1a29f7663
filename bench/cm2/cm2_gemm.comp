#version 450
// A probe, not a kernel of the library: how fast an H100 / H200 runs the tensor-core filter's GEMM shape
// (C = A·Bᵀ, A = M × K centroids, B = N × K table rows, fp16 → fp32) through
// GL_NV_cooperative_matrix2: workgroup-scope matrices loaded straight from device memory by
// tensor layouts (the driver stages them), then an epilogue on the accumulator:
//   EPI 0: nothing but one element an invocation kept. NOT the GEMM alone: the driver drops
//          the products that do not feed that element (so do EPI 4 and 6); EPI 15 is the GEMM
//          with every product live (bench/results/2026-12-06-h100-cm2-store-dce/);
//   EPI 1: each row's minimum over the tile (coopMatReduceNV), written per (row, tile);
//   EPI 2: the filter's shape of epilogue: a key per element from row and column scalars
//          (coopMatPerElementNV), the row minimum, then a count per row of the keys within a
//          band of it (shared-memory atomics), written per (row, tile);
//   EPI 3: the epilogue without a reduction (a threshold per row known before the products):
//          a key per element from row and column scalars staged in shared memory and a
//          chosen-bit mask, compared with the row's threshold; a hit takes a slot by a
//          shared-memory atomic and writes (key, column) to device memory (rare);
//   EPI 4: only EPI 3's keys (each element's key computed, nothing compared);
//   EPI 5: EPI 3 without side effects in the per-element function: a flag per element (key
//          within the threshold, not chosen), converted to uint8, stored to shared memory, then
//          scanned 16 bytes an invocation at a time; a hit writes (key bits 0, column);
//   EPI 6: subgroup-scope matrices instead (GL_KHR_cooperative_matrix with the extension's
//          flexible sizes and tensor-layout loads from device memory, no shared memory): each
//          of the workgroup's subgroups a BM × BN tile, the subgroups 2 × (WG / 64) (so the
//          workgroup's tile is 2·BM × (WG / 64)·BN; WG / 32 must be even), the GEMM alone;
//          the host's grid counts workgroup tiles the same way;
//   EPI 7: EPI 3 with a plain shared-memory store for a hit (the row's last hit column, no
//          atomic, no device-memory write), to see what EPI 3's side effects cost;
//   EPI 8: the hits found by the tensor cores: EPI 5's flags as an fp16 A matrix times a fixed
//          BN × 32 matrix whose entry (c, c / 8) is 2^(c % 8) (binding 7), so that each row's
//          result column g is the exact bit mask of its hits among columns 8g … 8g + 7 (sums of
//          distinct powers of two below 2^8: exact in an fp16 accumulator); the BM × 32 fp16
//          result through shared memory, then each hit as in EPI 3;
//   EPI 9 / 10: EPI 4's keys written to device memory (binding 8, M rows of N keys, each row's
//          stride N rounded up to 8 keys, clamped at the edges) by coopMatStoreTensorNV, as fp32 (9) or converted to an fp16 accumulator
//          first (10): the first half of a filter whose minima and bands a plain streaming
//          kernel would find;
//   EPI 11: every element of the accumulator summed (no product can be dead code); EPI 12: EPI
//          4's keys, every element's minimum taken;
//   EPI 13: EPI 10 through a plain strided coopMatStore (rows NT·BN keys apart, whole tiles);
//   EPI 14: EPI 0 with the kept element's index a push constant's value modulo the length (no
//          product can be dead code); EPI 15: EPI 11 with the loop unrolled;
//   EPI 16: the library filter's epilogue: EPI 4's keys, each row's minimum, up to 8 band
//          entries a row by shared atomics and shared stores, then (minimum, count) and the
//          entries to device memory (binding 6).
// Built by bench/cm2/build.sh with a glslang that knows GL_NV_cooperative_matrix2 (16.x); run by
// examples/cm2_probe.rs.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_EXT_control_flow_attributes : enable
#extension GL_KHR_shader_subgroup_basic : require

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 32;
layout(constant_id = 4) const uint EPI = 1;
// CLAMP 1: layouts that read zeros past M and N (an edge tile's need); 0: plain layouts (the
// probe pads A and B to whole tiles, so these read the padding).
layout(constant_id = 5) const uint CLAMP = 1;

layout(push_constant) uniform P { uint M; uint N; uint K; uint NT; float band; } p;
layout(binding = 0) readonly buffer A { float16_t a[]; };
layout(binding = 1) readonly buffer B { float16_t b[]; };
layout(binding = 2) buffer O { float o[]; };       // M × NT: each row's minimum a tile
layout(binding = 3) buffer C { uint cnt[]; };      // M × NT: keys within the band (EPI 2)
layout(binding = 4) readonly buffer RS { float rs[]; };  // a scalar a row of A
layout(binding = 5) readonly buffer CS { float cs[]; };  // a scalar a row of B

shared uint s_cnt[BM];
shared float s_min[EPI == 1u || EPI == 2u || EPI == 16u ? BM : 1u];
shared uvec2 s_band[EPI == 16u ? BM * 8u : 1u];  // EPI 16: up to 8 (key bits, column) a row
shared float s_rs[BM];
shared float s_thr[BM];
shared float s_cs[BN];
shared uint s_mask[BM * (BN / 32u)];
layout(binding = 6) buffer E { uvec2 ent[]; };    // EPI 3's hits: (key bits, column)
shared uvec4 s_flag[EPI == 5u ? BM * BN / 16u : 1u];
layout(binding = 7) readonly buffer BITS { float16_t bits[]; };  // 256 × 32, row-major (EPI 8)
shared float16_t s_res[EPI == 8u ? BM * 32u : 1u];
layout(binding = 8) buffer K32 { float keys32[]; };      // EPI 9
layout(binding = 8) buffer K16 { float16_t keys16[]; };  // EPI 10 (the same buffer)

uint g_ir, g_ic;

float key_of(const in uint r, const in uint c, const in float v) {
    return v * rs[g_ir * BM + r] + cs[g_ic * BN + c];
}
float fmin2(const in float x, const in float y) { return min(x, y); }
float put_min(const in uint r, const in uint c, const in float v) {
    if (c == 0u) s_min[r] = v;
    return v;
}
float key_shared(const in uint r, const in uint c, const in float v) {
    const bool chosen = ((s_mask[r * (BN / 32u) + c / 32u] >> (c % 32u)) & 1u) != 0u;
    return chosen ? uintBitsToFloat(0x7f800000u) : v * s_rs[r] + s_cs[c];
}
float hit(const in uint r, const in uint c, const in float v) {
    const bool chosen = ((s_mask[r * (BN / 32u) + c / 32u] >> (c % 32u)) & 1u) != 0u;
    const float f = v * s_rs[r] + s_cs[c];
    if (!chosen && f <= s_thr[r]) {
        const uint slot = atomicAdd(s_cnt[r], 1u);
        if (slot < 4u) ent[((g_ir * BM + r) * p.NT + g_ic) * 4u + slot] = uvec2(floatBitsToUint(f), g_ic * BN + c);
    }
    return f;
}
float hit_plain(const in uint r, const in uint c, const in float v) {
    const bool chosen = ((s_mask[r * (BN / 32u) + c / 32u] >> (c % 32u)) & 1u) != 0u;
    const float f = v * s_rs[r] + s_cs[c];
    if (!chosen && f <= s_thr[r]) s_cnt[r] = c + 1u;
    return f;
}
float flag(const in uint r, const in uint c, const in float v) {
    const bool chosen = ((s_mask[r * (BN / 32u) + c / 32u] >> (c % 32u)) & 1u) != 0u;
    return (!chosen && v * s_rs[r] + s_cs[c] <= s_thr[r]) ? 1.0 : 0.0;
}
float band_slot(const in uint r, const in uint c, const in float v) {
    if (v <= s_min[r] + p.band) {
        const uint slot = atomicAdd(s_cnt[r], 1u);
        if (slot < 8u) s_band[r * 8u + slot] = uvec2(floatBitsToUint(v), g_ic * BN + c);
    }
    return v;
}
float count_band(const in uint r, const in uint c, const in float v) {
    if (v <= s_min[r] + p.band) atomicAdd(s_cnt[r], 1u);
    return v;
}

void sg_gemm() {
    // Subgroup sg takes rows [(sg % 2)·BM, +BM) and columns [(sg / 2)·BN, +BN) of the
    // workgroup's 2·BM × (WG/64)·BN tile.
    const uint sg = gl_SubgroupID;
    const uint r0 = gl_WorkGroupID.x * 2u * BM + (sg % 2u) * BM;
    const uint c0 = gl_WorkGroupID.y * (gl_WorkGroupSize.x / 64u) * BN + (sg / 2u) * BN;
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> la =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    la = setTensorLayoutDimensionNV(la, p.M, p.K);
    la = setTensorLayoutStrideNV(la, p.K, 1);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lb =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lb = setTensorLayoutDimensionNV(lb, p.N, p.K);
    lb = setTensorLayoutStrideNV(lb, p.K, 1);
    tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);
    coopmat<float, gl_ScopeSubgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeSubgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
    for (uint k = 0u; k < p.K; k += BK) {
        coopmat<float16_t, gl_ScopeSubgroup, BM, BK, gl_MatrixUseA> ma;
        coopmat<float16_t, gl_ScopeSubgroup, BK, BN, gl_MatrixUseB> mb;
        coopMatLoadTensorNV(ma, a, 0, sliceTensorLayoutNV(la, r0, BM, k, BK));
        coopMatLoadTensorNV(mb, b, 0, sliceTensorLayoutNV(lb, c0, BN, k, BK), tr);
        acc = coopMatMulAdd(ma, mb, acc);
    }
    if (acc[0] == -12345.0) o[r0] = acc[0];
}

void main() {
    if (EPI == 6u) {
        sg_gemm();
        return;
    }
    g_ir = gl_WorkGroupID.x;
    g_ic = gl_WorkGroupID.y;
    const uint lid = gl_LocalInvocationIndex;
    for (uint i = lid; i < BM; i += gl_WorkGroupSize.x) {
        s_cnt[i] = 0u;
        s_rs[i] = rs[g_ir * BM + i];
        s_thr[i] = -4.3 * (sqrt(float(p.K)) / 3.0) * s_rs[i];  // about 1e-5 of the keys (σ = √K / 3)
    }
    for (uint i = lid; i < BN; i += gl_WorkGroupSize.x) s_cs[i] = cs[g_ic * BN + i];
    // A sparse chosen mask: one column in 61 of each row.
    for (uint i = lid; i < BM * (BN / 32u); i += gl_WorkGroupSize.x) {
        const uint r = i / (BN / 32u), w = i % (BN / 32u);
        uint m = 0u;
        for (uint b = 0u; b < 32u; ++b) m |= ((g_ic * BN + w * 32u + b + r) % 61u == 0u) ? (1u << b) : 0u;
        s_mask[i] = m;
    }
    barrier();

    tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);
    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
    if (CLAMP != 0u) {
        tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> la =
            createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
        la = setTensorLayoutDimensionNV(la, p.M, p.K);
        la = setTensorLayoutStrideNV(la, p.K, 1);
        tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lb =
            createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
        lb = setTensorLayoutDimensionNV(lb, p.N, p.K);
        lb = setTensorLayoutStrideNV(lb, p.K, 1);
        for (uint k = 0u; k < p.K; k += BK) {
            coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> ma;
            coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> mb;
            coopMatLoadTensorNV(ma, a, 0, sliceTensorLayoutNV(la, g_ir * BM, BM, k, BK));
            coopMatLoadTensorNV(mb, b, 0, sliceTensorLayoutNV(lb, g_ic * BN, BN, k, BK), tr);
            acc = coopMatMulAdd(ma, mb, acc);
        }
    } else {
        tensorLayoutNV<2> la = createTensorLayoutNV(2);
        la = setTensorLayoutDimensionNV(la, p.M + BM, p.K);
        la = setTensorLayoutStrideNV(la, p.K, 1);
        tensorLayoutNV<2> lb = createTensorLayoutNV(2);
        lb = setTensorLayoutDimensionNV(lb, p.N + BN, p.K);
        lb = setTensorLayoutStrideNV(lb, p.K, 1);
        for (uint k = 0u; k < p.K; k += BK) {
            coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> ma;
            coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> mb;
            coopMatLoadTensorNV(ma, a, 0, sliceTensorLayoutNV(la, g_ir * BM, BM, k, BK));
            coopMatLoadTensorNV(mb, b, 0, sliceTensorLayoutNV(lb, g_ic * BN, BN, k, BK), tr);
            acc = coopMatMulAdd(ma, mb, acc);
        }
    }
    if (EPI == 11u || EPI == 12u) {
        // Every element of each invocation's part summed (EPI 12: EPI 4's keys' minimum), so no
        // product can be dead code (EPI 0 and 4 observe one element an invocation).
        if (EPI == 12u) coopMatPerElementNV(acc, acc, key_shared);
        float t = EPI == 12u ? uintBitsToFloat(0x7f800000u) : 0.0;
        for (int i = 0; i < acc.length(); ++i) t = EPI == 12u ? min(t, acc[i]) : t + acc[i];
        if (t == -12345.0) o[g_ir * BM] = t;
        return;
    }
    if (EPI == 14u) {
        // One element an invocation, as EPI 0, but at an index the compiler cannot know (a push
        // constant's value): every product stays live.
        const uint j = p.NT % uint(acc.length());
        if (acc[j] == -12345.0) o[g_ir * BM] = acc[j];
        return;
    }
    if (EPI == 15u) {
        // EPI 11's sum with the loop unrolled at compile time.
        float t = 0.0;
        [[unroll]] for (int i = 0; i < acc.length(); ++i) t += acc[i];
        if (t == -12345.0) o[g_ir * BM] = t;
        return;
    }
    if (EPI == 16u) {
        // The library filter's epilogue: EPI 4's keys (chosen columns +INF), each row's minimum
        // over the tile (coopMatReduceNV), then every key within the band of it takes a slot by
        // a shared atomic and, among the first 8, stores (key, column) to shared memory; each
        // row's (minimum, count) and 8 entries go to device memory (binding 6, 9 uvec2 a (row,
        // tile)), as the filter's band words would.
        coopMatPerElementNV(acc, acc, key_shared);
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> mn;
        coopMatReduceNV(mn, acc, gl_CooperativeMatrixReduceRowNV, fmin2);
        coopMatPerElementNV(mn, mn, put_min);
        barrier();
        coopMatPerElementNV(acc, acc, band_slot);
        barrier();
        for (uint i = lid; i < BM * 9u; i += gl_WorkGroupSize.x) {
            const uint r = i / 9u, w = i % 9u;
            const uint row = g_ir * BM + r;
            if (row < p.M) {
                ent[(row * p.NT + g_ic) * 9u + w] =
                    w == 0u ? uvec2(floatBitsToUint(s_min[r]), s_cnt[r]) : s_band[r * 8u + w - 1u];
            }
        }
        return;
    }
    if (EPI == 13u) {
        // EPI 10 by a plain strided store (coopMatStore, row-major) instead of a tensor layout:
        // rows at a stride of NT·BN keys (whole tiles, no clamping).
        coopMatPerElementNV(acc, acc, key_shared);
        coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> k16 =
            coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
        coopMatStore(k16, keys16, (g_ir * BM) * (p.NT * BN) + g_ic * BN, p.NT * BN,
                     gl_CooperativeMatrixLayoutRowMajor);
        return;
    }
    if (EPI == 0u) {
        // Keep the GEMM: one element of each invocation's part feeds a store nobody reads.
        if (acc[0] == -12345.0) o[g_ir * BM] = acc[0];
        return;
    }
    if (EPI == 9u || EPI == 10u) {
        coopMatPerElementNV(acc, acc, key_shared);
        tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lk =
            createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
        lk = setTensorLayoutDimensionNV(lk, p.M, p.N);
        lk = setTensorLayoutStrideNV(lk, (p.N + 7u) & ~7u, 1);  // rows padded to 8 keys (16-byte loads)
        if (EPI == 9u) {
            coopMatStoreTensorNV(acc, keys32, 0, sliceTensorLayoutNV(lk, g_ir * BM, BM, g_ic * BN, BN));
        } else {
            coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> k16 =
                coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
            coopMatStoreTensorNV(k16, keys16, 0, sliceTensorLayoutNV(lk, g_ir * BM, BM, g_ic * BN, BN));
        }
        return;
    }
    if (EPI == 8u) {
        coopMatPerElementNV(acc, acc, flag);
        coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseA> fa =
            coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseA>(acc);
        coopmat<float16_t, gl_ScopeWorkgroup, BN, 32, gl_MatrixUseB> mb;
        coopMatLoad(mb, bits, 0, 32, gl_CooperativeMatrixLayoutRowMajor);
        coopmat<float16_t, gl_ScopeWorkgroup, BM, 32, gl_MatrixUseAccumulator> res =
            coopMatMulAdd(fa, mb, coopmat<float16_t, gl_ScopeWorkgroup, BM, 32, gl_MatrixUseAccumulator>(float16_t(0.0)));
        coopMatStore(res, s_res, 0, 32, gl_CooperativeMatrixLayoutRowMajor);
        barrier();
        for (uint i = lid; i < BM * (BN / 8u); i += gl_WorkGroupSize.x) {
            const uint r = i / (BN / 8u), g = i % (BN / 8u);
            uint m = uint(s_res[r * 32u + g]);
            while (m != 0u) {
                const uint c = g * 8u + uint(findLSB(m));
                m &= m - 1u;
                const uint slot = atomicAdd(s_cnt[r], 1u);
                if (slot < 4u) ent[((g_ir * BM + r) * p.NT + g_ic) * 4u + slot] = uvec2(0u, g_ic * BN + c);
            }
        }
        barrier();
        for (uint i = lid; i < BM; i += gl_WorkGroupSize.x) {
            const uint row = g_ir * BM + i;
            if (row < p.M) cnt[row * p.NT + g_ic] = s_cnt[i];
        }
        return;
    }
    if (EPI == 5u) {
        coopMatPerElementNV(acc, acc, flag);
        coopmat<uint8_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> f8 =
            coopmat<uint8_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
        coopMatStore(f8, s_flag, 0, BN / 16u, gl_CooperativeMatrixLayoutRowMajor);
        barrier();
        for (uint i = lid; i < BM * BN / 16u; i += gl_WorkGroupSize.x) {
            const uvec4 q = s_flag[i];
            if (q != uvec4(0u)) {
                for (uint b = 0u; b < 16u; ++b) {
                    if (((q[b / 4u] >> (8u * (b % 4u))) & 255u) != 0u) {
                        const uint r = (i * 16u + b) / BN, c = (i * 16u + b) % BN;
                        const uint slot = atomicAdd(s_cnt[r], 1u);
                        if (slot < 4u) ent[((g_ir * BM + r) * p.NT + g_ic) * 4u + slot] = uvec2(0u, g_ic * BN + c);
                    }
                }
            }
        }
        barrier();
        for (uint i = lid; i < BM; i += gl_WorkGroupSize.x) {
            const uint row = g_ir * BM + i;
            if (row < p.M) cnt[row * p.NT + g_ic] = s_cnt[i];
        }
        return;
    }
    if (EPI == 3u || EPI == 4u || EPI == 7u) {
        if (EPI == 3u) coopMatPerElementNV(acc, acc, hit);
        if (EPI == 7u) coopMatPerElementNV(acc, acc, hit_plain);
        if (EPI == 4u) coopMatPerElementNV(acc, acc, key_shared);
        barrier();
        for (uint i = lid; i < BM; i += gl_WorkGroupSize.x) {
            const uint row = g_ir * BM + i;
            if (row < p.M) cnt[row * p.NT + g_ic] = s_cnt[i];
        }
        if (EPI == 4u && acc[0] == -12345.0) o[g_ir * BM] = acc[0];
        return;
    }
    if (EPI == 2u) coopMatPerElementNV(acc, acc, key_of);
    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> mn;
    coopMatReduceNV(mn, acc, gl_CooperativeMatrixReduceRowNV, fmin2);
    coopMatPerElementNV(mn, mn, put_min);
    barrier();
    if (EPI == 2u) {
        coopMatPerElementNV(acc, acc, count_band);
        barrier();
    }
    for (uint i = lid; i < BM; i += gl_WorkGroupSize.x) {
        const uint row = g_ir * BM + i;
        if (row < p.M) {
            o[row * p.NT + g_ic] = s_min[i];
            if (EPI == 2u) cnt[row * p.NT + g_ic] = s_cnt[i];
        }
    }
}
