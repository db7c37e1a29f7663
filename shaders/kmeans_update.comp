#version 450
// k-means update, the sums (src/ivf/update.rs): one workgroup a centroid adds, in float64, dim by
// dim, the rows of its cluster in ascending row order — the additions the host's float64 update
// makes, in the same order, so the sums are the same bits. members lists the rows cluster by
// cluster (ranges[c] .. ranges[c + 1] are cluster c's). A dispatch adds members [m0, m1) of each
// cluster (by position within it) to the sums the previous one left (acc = 1), so a device that
// caps loop iterations (lavapipe) can take a large cluster in several dispatches.
layout(local_size_x = 128) in;

layout(std430, set = 0, binding = 0) readonly buffer Rows { float rows[]; };
layout(std430, set = 0, binding = 1) readonly buffer Members { uint members[]; };
layout(std430, set = 0, binding = 2) readonly buffer Ranges { uint ranges[]; };
layout(std430, set = 0, binding = 3) buffer Sums { double sums[]; };

layout(push_constant) uniform Push {
    uint dim;  // D
    uint c0;   // first centroid of this dispatch
    uint m0;   // members [m0, m1) of each cluster
    uint m1;
    uint acc;  // 1: add to the sums already there
} pc;

void main() {
    const uint c = pc.c0 + gl_WorkGroupID.x;
    const uint lo = ranges[c], hi = ranges[c + 1u];
    const uint b = min(lo + pc.m0, hi), e = min(lo + pc.m1, hi);
    for (uint j = gl_LocalInvocationID.x; j < pc.dim; j += gl_WorkGroupSize.x) {
        precise double s = pc.acc == 1u ? sums[c * pc.dim + j] : 0.0lf;
        for (uint m = b; m < e; ++m) {
            precise double v = s + double(rows[members[m] * pc.dim + j]);
            s = v;
        }
        sums[c * pc.dim + j] = s;
    }
}
