// Radix-4 MoE router top-k: one algorithm for CUDA (warp32) and HIP (wave64).
//
// What it computes (contract `aiter`, ROUTING_CONTRACTS.md section 3), as
// plain torch:
//
//     sig = 1 / (1 + exp2(-log2(e) * scores.float()))       # IEEE division
//     r   = sig + bias.float()                              # ranks only
//     key = rank_key(r)          # order-preserving, -0 == +0, NaN -> 0
//     ids = the topk experts by (key desc, tie priority asc)
//     w   = sig[ids]; if renormalize and w.sum() > 0: w = w / w.sum()
//     w   = w * routed_scaling_factor
//
// The tie priority is aiter's wave64 traversal order (tie_order.h).
//
// How: each token is routed by one group of Lanes::kLanes lanes (a warp on
// CUDA, a wave on HIP) that holds its E scores in registers, 4 consecutive
// experts per group of registers: vector g = e >> 2 lives on lane
// g % kLanes, slot g / kLanes. A radix select over the composite key
// (rank key, 12-bit inverted tie priority) finds the k-th largest composite,
// 4 bits per round: every round builds a 16-bin histogram of the current
// digit of the remaining candidates, sums it across the lanes and walks the
// bins from the top. The composite is unique per expert, so the cutoff is
// exact and there are exactly k winners. The number of rounds depends on the
// key width, not on k; two shortcuts keep it small:
//   - digits that every key shares (the sign and most of the exponent, for
//     sigmoid scores) are skipped with one AND/OR reduction;
//   - the select stops as soon as the cutoff bin holds exactly the winners
//     still needed; the tie-priority digits are visited only when whole
//     rank keys tie at the cutoff.
// Winners are then written to shared memory in lane order and each of the
// first k lanes places one of them by its rank among the winners, which
// gives the output order (key desc, tie priority asc).
//
// Launch shape: grid = ceil(M / kTokensPerBlock), block = kLanes *
// kTokensPerBlock threads, 16 * k * kTokensPerBlock bytes of static shared
// memory. No fast math anywhere: the sigmoid must round like the contract's
// so that ids stay comparable.
#pragma once

#include <stdint.h>

#include "tie_order.h"

// No contraction into fused multiply-adds: the contract rounds every step.
// (nvcc has no such pragma: its builds pass -fmad=false.)
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace radix4 {

// ---- element types: raw bits in memory, widened to fp32 in registers ----

struct F32 {
    using Raw = uint32_t;
    template <class L>
    static __device__ __forceinline__ float widen(Raw bits) { return L::as_float(bits); }
};

// bf16 is read as its 16 raw bits: the widening shift is exact and needs no
// bf16 header (HIP 5.2 has none).
struct Bf16 {
    using Raw = uint16_t;
    template <class L>
    static __device__ __forceinline__ float widen(Raw bits) { return L::as_float(static_cast<uint32_t>(bits) << 16); }
};

// Four consecutive experts, widened. kVec: one 8- or 16-byte load (the host
// checks alignment); otherwise four scalar loads.
template <class T, class L, bool kVec>
__device__ __forceinline__ void load4(const typename T::Raw* p, float out[4]) {
    typename T::Raw raw[4];
    if constexpr (kVec && sizeof(typename T::Raw) == 4) {
        const uint4 v = *reinterpret_cast<const uint4*>(p);
        raw[0] = v.x, raw[1] = v.y, raw[2] = v.z, raw[3] = v.w;
    } else if constexpr (kVec && sizeof(typename T::Raw) == 2) {
        const uint2 v = *reinterpret_cast<const uint2*>(p);
        raw[0] = static_cast<uint16_t>(v.x), raw[1] = static_cast<uint16_t>(v.x >> 16);
        raw[2] = static_cast<uint16_t>(v.y), raw[3] = static_cast<uint16_t>(v.y >> 16);
    } else {
        raw[0] = p[0], raw[1] = p[1], raw[2] = p[2], raw[3] = p[3];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = T::template widen<L>(raw[i]);
}

// ---- the contract's arithmetic ----

// aiter's form of the sigmoid; exp2f and the division are the accurate
// library versions because no fast-math flag is given.
__device__ __forceinline__ float contract_sigmoid(float x) {
    constexpr float kNegLog2e = -1.44269504088896340736f;
    return 1.0f / (1.0f + exp2f(kNegLog2e * x));
}

// The float-to-key twiddle: an order-preserving map of fp32 onto uint32.
// Negative floats have all bits flipped, others only the sign bit. -0.0 is
// first made +0.0, so both zeros share a key; every NaN maps to 0, below
// the key of -inf (0x007fffff), so NaN never displaces a number.
template <class L>
__device__ __forceinline__ uint32_t rank_key(float r) {
    if (r != r) return 0u;
    const uint32_t bits = (r == 0.0f) ? 0u : L::as_uint(r);
    return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// ---- one radix round: histogram, cross-lane sum, bin walk ----

struct Pick {
    uint32_t digit;   // the bin holding the k-th candidate
    uint32_t above;   // candidates in higher bins (all winners)
    uint32_t in_bin;  // candidates in that bin
};

// Per-lane histogram: 16 nibble counters per uint64_t, one uint64_t per
// kValsPerCounter values so that no nibble overflows.
template <class L, int kVals>
struct Histogram {
    static constexpr int kValsPerCounter = 15;
    static constexpr int kCounters = (kVals + kValsPerCounter - 1) / kValsPerCounter;
    static_assert(kVals <= 255, "per-lane bin counts are widened through bytes");
    uint64_t counter[kCounters];

    __device__ __forceinline__ Histogram() {
#pragma unroll
        for (int c = 0; c < kCounters; ++c) counter[c] = 0;
    }
    // t = the value's digit if it is a candidate, anything >= 16 if not.
    __device__ __forceinline__ void add(int j, uint32_t t) { counter[j / kValsPerCounter] += L::one_hot_nibble(t); }

    // Sum over the lanes and find the bin where the `needed`-th largest
    // candidate lies.
    __device__ __forceinline__ Pick pick(uint32_t needed) const {
        constexpr uint64_t kLowNibbles = 0x0f0f0f0f0f0f0f0full;
        uint64_t even = 0, odd = 0;  // bytes: bins 0,2,..,14 and 1,3,..,15
#pragma unroll
        for (int c = 0; c < kCounters; ++c) {
            even += counter[c] & kLowNibbles;
            odd += (counter[c] >> 4) & kLowNibbles;
        }
        // Eight words of two 16-bit bin counts; a token has at most 4096
        // experts, so the cross-lane sums never carry between halves.
        const uint32_t e0 = static_cast<uint32_t>(even), e1 = static_cast<uint32_t>(even >> 32);
        const uint32_t o0 = static_cast<uint32_t>(odd), o1 = static_cast<uint32_t>(odd >> 32);
        const uint32_t words[8] = {
            L::bytes01_to_pair(e0), L::bytes23_to_pair(e0), L::bytes01_to_pair(e1), L::bytes23_to_pair(e1),
            L::bytes01_to_pair(o0), L::bytes23_to_pair(o0), L::bytes01_to_pair(o1), L::bytes23_to_pair(o1),
        };
        uint32_t total[8];
#pragma unroll
        for (int w = 0; w < 8; ++w) total[w] = L::sum(words[w]);

        Pick p{0u, 0u, 0u};
        bool found = false;
#pragma unroll
        for (int b = 15; b >= 0; --b) {
            // bin 2m is half m&1 of word m>>1; bin 2m+1 the same in word 4 + (m>>1)
            const int m = b >> 1;
            const uint32_t word = total[(b & 1) * 4 + (m >> 1)];
            const uint32_t count = (m & 1) ? (word >> 16) : (word & 0xffffu);
            if (!found) {
                if (p.above + count >= needed) {
                    found = true;
                    p.digit = static_cast<uint32_t>(b);
                    p.in_bin = count;
                } else {
                    p.above += count;
                }
            }
        }
        return p;
    }
};

// ---- the kernel ----

// In global memory, not __constant__: lanes read different entries, which
// the constant cache would serialize.
template <int E>
__device__ const TieTable<E> kDeviceTieTable = make_tie_table<E>();

template <class L, int E, int K, class Score, class Bias, bool kVec, int kTokensPerBlock>
__global__ void __launch_bounds__(L::kLanes * kTokensPerBlock)
route_kernel(const typename Score::Raw* __restrict__ scores, int64_t row_stride,
             const typename Bias::Raw* __restrict__ bias, int rows, int renormalize, float routed_scaling_factor,
             float* __restrict__ weights, int32_t* __restrict__ ids) {
    constexpr int kLanes = L::kLanes;
    constexpr int kGroups = E / 4;
    constexpr int kSlots = (kGroups + kLanes - 1) / kLanes;  // vectors per lane
    constexpr int kVals = 4 * kSlots;
    constexpr bool kRagged = kGroups % kLanes != 0;  // last slot empty on some lanes
    constexpr int kPrioBits = 12;                    // tie priority < 4096
    static_assert(E % 4 == 0 && E <= (1 << kPrioBits), "E must be a multiple of 4, at most 4096");
    static_assert(K >= 1 && K <= kLanes && K <= E, "one lane places each winner: 1 <= k <= lanes, k <= E");
    static_assert(kVals <= 64, "a lane keeps its winners in a 64-bit mask");

    struct Entry {
        uint64_t composite;  // key << 32 | inverted priority: larger ranks first
        float sig;
        int32_t id;
    };
    __shared__ Entry winners[kTokensPerBlock][K];

    const int lane = L::lane();
    const int token = blockIdx.x * kTokensPerBlock + L::group();
    if (token >= rows) return;  // whole lane groups leave together

    // ---- load, sigmoid, rank keys ----
    const typename Score::Raw* row = scores + static_cast<int64_t>(token) * row_stride;
    float sig[kVals];
    uint32_t key[kVals];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
        const int g = lane + kLanes * s;
        if (!kRagged || s < kSlots - 1 || g < kGroups) {
            float x[4], b[4];
            load4<Score, L, kVec>(row + 4 * g, x);
            load4<Bias, L, kVec>(bias + 4 * g, b);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                sig[4 * s + i] = contract_sigmoid(x[i]);
                key[4 * s + i] = rank_key<L>(sig[4 * s + i] + b[i]);
            }
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) sig[4 * s + i] = 0.0f, key[4 * s + i] = 0u;
        }
    }
    // aiter's lane of vector g is g & 63: with 32 lanes that alternates
    // between this lane and lane + 32, with 64 it is always this lane.
    const uint32_t vec_base[2] = {kDeviceTieTable<E>.vec_base[lane & 63],
                                  kDeviceTieTable<E>.vec_base[(lane + kLanes) & 63]};

    auto valid = [&](int j) -> bool { return !kRagged || j / 4 < kSlots - 1 || lane + kLanes * (j / 4) < kGroups; };
    // Inverted tie priority: larger wins, like the key.
    auto inv_priority = [&](int j) -> uint32_t {
        const int s = j / 4, g = lane + kLanes * s;
        const uint32_t priority = 4u * (vec_base[s & 1] + static_cast<uint32_t>(g >> 6)) + static_cast<uint32_t>(j & 3);
        return static_cast<uint32_t>(E - 1) - priority;
    };

    // ---- radix select over (key, inverted priority) ----
    // A value wins iff (key >> kshift) > khi, or equal and valid and
    // (inv_priority >> qshift) >= qhi.
    uint32_t needed = K;
    uint32_t kshift = 0, khi = 0, qshift = 31, qhi = 0;

    uint32_t all_and = ~0u, all_or = 0u;
#pragma unroll
    for (int j = 0; j < kVals; ++j) {
        if (valid(j)) all_and &= key[j], all_or |= key[j];
    }
    all_and = L::all_and(all_and);
    all_or = L::all_or(all_or);
    const uint32_t differ = all_and ^ all_or;

    bool key_tied = true;  // whole keys tie at the cutoff: rank by priority
    uint32_t cut_key = all_and;
    if (differ != 0u) {
        int shift = (31 - L::count_leading_zeros(differ)) & ~3;
        uint32_t hi = shift >= 28 ? 0u : all_and >> (shift + 4);
        for (;;) {
            const uint32_t base = hi << 4;
            Histogram<L, kVals> hist;
#pragma unroll
            for (int j = 0; j < kVals; ++j) hist.add(j, (key[j] >> shift) - base);
            const Pick p = hist.pick(needed);
            needed -= p.above;
            hi = base | p.digit;
            if (p.in_bin == needed) {
                key_tied = false;
                kshift = static_cast<uint32_t>(shift);
                khi = hi;
                break;
            }
            if (shift == 0) break;
            shift -= 4;
        }
        cut_key = hi;
    }
    if (key_tied) {
        kshift = 0;
        khi = cut_key;
        int shift = kPrioBits - 4;
        uint32_t hi = 0;
        for (;;) {
            const uint32_t base = hi << 4;
            Histogram<L, kVals> hist;
#pragma unroll
            for (int j = 0; j < kVals; ++j) {
                hist.add(j, (valid(j) && key[j] == cut_key) ? (inv_priority(j) >> shift) - base : 16u);
            }
            const Pick p = hist.pick(needed);
            needed -= p.above;
            hi = base | p.digit;
            // Priorities are distinct, so by shift 0 the bin holds exactly one.
            if (p.in_bin == needed || shift == 0) {
                qshift = static_cast<uint32_t>(shift);
                qhi = hi;
                break;
            }
            shift -= 4;
        }
    }

    // ---- gather the k winners, then place each by its rank ----
    uint64_t won = 0;
#pragma unroll
    for (int j = 0; j < kVals; ++j) {
        const uint32_t top = key[j] >> kshift;
        const bool win = top > khi || (top == khi && valid(j) && (inv_priority(j) >> qshift) >= qhi);
        won |= static_cast<uint64_t>(win) << j;
    }
    uint32_t slot = L::exclusive_scan(static_cast<uint32_t>(__popcll(won)));
    Entry* mine = winners[L::group()];
#pragma unroll
    for (int j = 0; j < kVals; ++j) {
        if ((won >> j) & 1u) {
            const int expert = 4 * (lane + kLanes * (j / 4)) + (j & 3);
            mine[slot++] = Entry{(static_cast<uint64_t>(key[j]) << 32) | inv_priority(j), sig[j], expert};
        }
    }
    L::sync();

    Entry w{0u, 0.0f, 0};
    int rank = 0;
    if (lane < K) {
        w = mine[lane];
#pragma unroll
        for (int i = 0; i < K; ++i) rank += mine[i].composite > w.composite;
    }
    const float total = L::sum_f32(lane < K ? w.sig : 0.0f);
    if (lane < K) {
        float weight = w.sig;
        if (renormalize && total > 0.0f) weight = weight / total;
        weight = weight * routed_scaling_factor;
        const int64_t at = static_cast<int64_t>(token) * K + rank;
        weights[at] = weight;
        ids[at] = w.id;
    }
}

}  // namespace radix4
