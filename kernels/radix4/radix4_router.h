// Radix-4 MoE router top-k: one algorithm for CUDA (warp32) and HIP (wave64).
//
// What it computes (contract `aiter`, docs/contracts.md#contract-aiter), as
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
// How: each token is routed by kWarpsPerToken lane groups of L::kLanes
// lanes (warps on CUDA, waves on HIP) that hold its E scores in registers,
// 4 consecutive experts per vector: vector g = e >> 2 lives on the token's
// thread g % threads, slot g / threads. Every expert has a composite key
// (rank key, 12-bit inverted tie priority, 12-bit expert id), unique per
// expert, so the k winners are exactly the k largest composites. In the
// usual case they are found without a histogram (route_kernel lists the
// steps): the lane maxima of the keys give a lower bound `lo` that at least
// k keys reach (in each lane group, the k-th largest lane maximum: k lanes
// hold a key at least that large); for sigmoid scores only about 20 of 896
// keys reach it in a warp-per-token launch, about 25 with four warps
// (benchmarks/radix4_bound_sim.py). Those
// keys are copied to shared memory, where each is ranked by counting the
// larger composites. The rank is the output position.
//
// When the set is too large (many keys tied near the max, NaN rows), a
// radix select over the composite takes over, 4 bits per round: every
// round builds a 16-bin histogram of the current digit of the remaining
// candidates, sums it over the token's threads and finds the bin holding
// the cutoff. It starts at the first bit where the bound and the max
// differ, stops as soon as the cutoff bin holds exactly the winners still
// needed, and visits the tie-priority digits only when whole rank keys tie
// at the cutoff. Its winners are written to shared memory in any order and
// each of the first k lanes places one by its rank among the winners.
// Either way the output order is (key desc, tie priority asc) and the
// renormalizing total is summed in that order.
//
// Launch shape: either a block per token (kWarpsPerToken warps, grid = M;
// the low-latency choice for small batches) or a warp per token
// (kTokensPerBlock warps per block, grid = ceil(M / kTokensPerBlock)); the
// entry point picks by M (radix4_entry.h). Static shared memory: about
// 28 * k * kTokensPerBlock + 12 * RADIX4_RANK_MAX * kWarpsPerToken *
// kTokensPerBlock bytes (5-8 KB). No fast math anywhere: the sigmoid must
// round like the contract's so that ids stay comparable (on CUDA its
// reciprocal is a branch-free sequence that is exact below 2^126, checked
// for every input by benchmarks/radix4_sigmoid_exhaustive.cu).
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

// aiter's form of the sigmoid, 1 / (1 + exp2(-log2(e) * x)), in two
// halves: the denominator (exp2f is the accurate library version because no
// fast-math flag is given) and its IEEE reciprocal. L::reciprocal is exact
// below L::kReciprocalLimit; sigmoids() redoes the rest with `1.0f / y`.
__device__ __forceinline__ float sigmoid_denominator(float x) {
    constexpr float kNegLog2e = -1.44269504088896340736f;
    return 1.0f + exp2f(kNegLog2e * x);
}
// IEEE 1 / y out of line: only the rare denominators at or above
// L::kReciprocalLimit come here, and one copy of the division keeps the
// hot path's code short (the kernel runs each instruction about once, so
// its code size is instruction-cache time).
__device__ __noinline__ float ieee_reciprocal(float y) { return 1.0f / y; }

template <class L>
__device__ __forceinline__ float contract_sigmoid(float x) {
    const float y = sigmoid_denominator(x);
    return y < L::kReciprocalLimit ? L::reciprocal(y) : ieee_reciprocal(y);
}

// The float-to-key twiddle: an order-preserving map of fp32 onto uint32.
// Negative floats have all bits flipped, others only the sign bit; every
// NaN maps to 0, below the key of -inf (0x007fffff), so NaN never displaces
// a number. The contract gives -0.0 and +0.0 one key; this map does not,
// and need not: it only sees r = sig + bias with sig >= +0, and in round
// to nearest such a sum is never -0 (+0 + -0 = +0, x + -x = +0).
template <class L>
__device__ __forceinline__ uint32_t rank_key_of_sum(float r) {
    const uint32_t bits = L::as_uint(r);
    const uint32_t flip = static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) | 0x80000000u;
    return r != r ? 0u : bits ^ flip;
}

// ---- one radix round: histogram, sum over the token's threads, bin walk ----

struct Pick {
    uint32_t digit;   // the bin holding the needed-th largest candidate
    uint32_t above;   // candidates in higher bins (all winners)
    uint32_t in_bin;  // candidates in that bin
};

// Per-thread histogram: 16 nibble counters per uint64_t, one uint64_t per
// kValsPerCounter values so that no nibble overflows.
template <class L, int kVals>
struct Histogram {
    static constexpr int kValsPerCounter = 15;
    static constexpr int kCounters = (kVals + kValsPerCounter - 1) / kValsPerCounter;
    static_assert(kVals <= 255, "per-thread bin counts are widened through bytes");
    uint64_t counter[kCounters];

    __device__ __forceinline__ Histogram() {
#pragma unroll
        for (int c = 0; c < kCounters; ++c) counter[c] = 0;
    }
    // t = the value's digit if it is a candidate, anything >= 16 if not.
    __device__ __forceinline__ void add(int j, uint32_t t) { counter[j / kValsPerCounter] += L::one_hot_nibble(t); }

    // Eight words of two 16-bit bin counts, ready to be summed as integers
    // (a token has at most 4096 experts, so sums never carry between
    // halves): out[q] holds bins 4q and 4q+2, out[4+q] bins 4q+1 and 4q+3.
    __device__ __forceinline__ void words(uint32_t out[8]) const {
        constexpr uint64_t kLowNibbles = 0x0f0f0f0f0f0f0f0full;
        uint64_t even = 0, odd = 0;  // bytes: bins 0,2,..,14 and 1,3,..,15
#pragma unroll
        for (int c = 0; c < kCounters; ++c) {
            even += counter[c] & kLowNibbles;
            odd += (counter[c] >> 4) & kLowNibbles;
        }
        const uint32_t e0 = static_cast<uint32_t>(even), e1 = static_cast<uint32_t>(even >> 32);
        const uint32_t o0 = static_cast<uint32_t>(odd), o1 = static_cast<uint32_t>(odd >> 32);
        out[0] = L::bytes01_to_pair(e0), out[1] = L::bytes23_to_pair(e0);
        out[2] = L::bytes01_to_pair(e1), out[3] = L::bytes23_to_pair(e1);
        out[4] = L::bytes01_to_pair(o0), out[5] = L::bytes23_to_pair(o0);
        out[6] = L::bytes01_to_pair(o1), out[7] = L::bytes23_to_pair(o1);
    }
};

// The bin walk, without a loop over bins: suffix sums S(b) = count of
// candidates in bins >= b, four 16-bit fields per uint64_t, then
// digit = #{b : S(b) >= needed} - 1 by a packed compare and popcounts.
// A sequential walk is a chain of 16 dependent steps; this is about 12.
__device__ __forceinline__ Pick pick_bin(const uint32_t total[8], uint32_t needed) {
    constexpr uint64_t kOnes = 0x0001000100010001ull, kHigh = 0x8000800080008000ull;
    uint64_t s[4];  // s[q] field f = count of bin 4q + f, then S(4q + f)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        // bin 4q and 4q+2 are halves of total[q], 4q+1 and 4q+3 of total[4+q]
        const uint32_t lo = (total[q] & 0xffffu) | (total[4 + q] << 16);
        const uint32_t hi = (total[q] >> 16) | (total[4 + q] & 0xffff0000u);
        s[q] = (static_cast<uint64_t>(hi) << 32) | lo;
        s[q] += s[q] >> 16;
        s[q] += s[q] >> 32;
    }
#pragma unroll
    for (int q = 2; q >= 0; --q) s[q] += (s[q + 1] & 0xffffu) * kOnes;
    uint32_t at_least = 0;
#pragma unroll
    for (int q = 0; q < 4; ++q) at_least += __popcll(((s[q] | kHigh) - needed * kOnes) & kHigh);
    const uint32_t digit = at_least - 1;  // S(0) = all candidates >= needed
    auto suffix = [&](uint32_t b) -> uint32_t {
        const uint64_t word = b < 4 ? s[0] : b < 8 ? s[1] : b < 12 ? s[2] : s[3];
        return static_cast<uint32_t>(word >> (16 * (b & 3))) & 0xffffu;
    };
    const uint32_t at_digit = suffix(digit);
    const uint32_t above = digit == 15 ? 0u : suffix(digit + 1);
    return Pick{digit, above, at_digit - above};
}

// ---- the kernel ----

// In global memory, not __constant__: lanes read different entries, which
// the constant cache would serialize.
template <int E>
__device__ const TieTable<E> kDeviceTieTable = make_tie_table<E>();

// Step clocks for benchmarks/radix4_lab.py: a RADIX4_LAB build records the
// SM clock of block 0, thread 0 at each step; other builds compile nothing.
#ifdef RADIX4_LAB
__device__ unsigned long long radix4_lab_clock[8];
#define RADIX4_STAMP(i)                                                               \
    do {                                                                              \
        if (blockIdx.x == 0 && threadIdx.x == 0) radix4_lab_clock[i] = clock64();     \
    } while (0)
#else
#define RADIX4_STAMP(i) \
    do {                \
    } while (0)
#endif

// Largest candidate set the rank step takes (see route_kernel); larger sets
// go through the radix rounds. 0 turns the rank step off (benchmarks).
#ifndef RADIX4_RANK_MAX
#define RADIX4_RANK_MAX 128
#endif

// kWarpsPerToken lane groups (warps / waves) route one token together; with
// more than one, a block is one token and histograms are summed across the
// warps through shared memory (one barrier per round). With one,
// kTokensPerBlock warps each route their own token and never synchronize
// beyond the warp. Many warps per token cut a token's latency (small
// batches); one warp per token has the least overhead per token (large
// batches).
//
// Steps:
//   1. Each lane group reduces the max and min of its keys and ranks its
//      lanes' maxima against each other (lane shuffles): the k-th largest
//      lane maximum is reached by at least k keys. With several groups,
//      each also gives its ceil(k / m)-th largest lane maximum for m = 1 ..
//      groups, and these meet in shared memory (one barrier): the m-th
//      largest of them over the groups is reached by k keys too, and lo is
//      the largest such bound. If min == max every key is equal and the
//      winners are the k first in tie priority: no selection.
//   2a. Every key >= lo (C of them, about two dozen) is copied to its
//      group's region of shared memory; after one barrier the first group
//      ranks each by counting the larger composites (with C <= lanes, one
//      candidate per lane and lane shuffles; else reading the regions), and
//      ranks below k are the winners, already in output order. The other
//      groups are done.
//   2b. If C > RADIX4_RANK_MAX (wide tie pools, NaN rows) the copy is
//      dropped and the radix select below runs instead, starting at the
//      first bit where lo and max differ; then winners are gathered and
//      placed.
template <class L, int E, int K, class Score, class Bias, bool kVec, int kWarpsPerToken, int kTokensPerBlock>
__global__ void __launch_bounds__(L::kLanes * kWarpsPerToken * kTokensPerBlock, 1)
route_kernel(const typename Score::Raw* __restrict__ scores, int64_t row_stride,
             const typename Bias::Raw* __restrict__ bias, int rows, int renormalize, float routed_scaling_factor,
             float* __restrict__ weights, int32_t* __restrict__ ids) {
    constexpr int kLanes = L::kLanes;
    constexpr int kThreads = kLanes * kWarpsPerToken;  // threads per token
    constexpr int kGroups = E / 4;
    constexpr int kSlots = (kGroups + kThreads - 1) / kThreads;  // vectors of 4 per thread
    constexpr int kVals = 4 * kSlots;
    constexpr bool kRagged = kGroups % kThreads != 0;  // last slot empty on some threads
    constexpr bool kShared = kWarpsPerToken > 1;
    constexpr int kPrioBits = 12;  // tie priority < 4096, and so is an expert id
    constexpr uint64_t kIdMask = (uint64_t{1} << kPrioBits) - 1u;
    constexpr int kRankMax = RADIX4_RANK_MAX;
    // One warp's share of the candidates, at most, rounded up to the rank
    // step's four entries per step.
    constexpr int kRankCap = kRankMax > 0 ? (kRankMax + 3) & ~3 : 4;
    static_assert(E % 4 == 0 && E <= (1 << kPrioBits), "E must be a multiple of 4, at most 4096");
    static_assert(K >= 1 && K <= kLanes && K <= E, "one lane places each winner: 1 <= k <= lanes, k <= E");
    static_assert(kVals <= 64, "a thread keeps its winners in a 64-bit mask");
    static_assert(!kShared || kTokensPerBlock == 1, "a token spread over warps owns its block");
    static_assert(kRankMax >= 0 && kRankMax <= 1024, "RADIX4_RANK_MAX must be 0..1024");

    struct Entry {
        uint64_t composite;  // as composite(j) below: larger ranks first
        float sig;
        int32_t id;
    };
    __shared__ Entry winners[kTokensPerBlock][K];
    __shared__ float ranked_sig[kTokensPerBlock][K];
    __shared__ int32_t ranked_id[kTokensPerBlock][K];
    // Per-warp sums (8 words), or step 1's max, min and bounds (2 + warps).
    constexpr int kPartialWords = 2 + kWarpsPerToken > 8 ? 2 + kWarpsPerToken : 8;
    __shared__ uint32_t partial[2][kWarpsPerToken][kPartialWords];  // double-buffered by round
    __shared__ uint32_t winner_count;
    // The rank step's candidates, one region per warp (a warp's share of the
    // token's C candidates is at most C); 16-byte aligned so that two
    // composites load as one.
    alignas(16) __shared__ uint64_t cand_composite[kTokensPerBlock][kWarpsPerToken][kRankCap];
    __shared__ float cand_sig[kTokensPerBlock][kWarpsPerToken][kRankCap];
    __shared__ uint32_t cand_count[kTokensPerBlock][kWarpsPerToken];

    const int lane = L::lane();
    const int warp = L::group();
    const int local = kShared ? 0 : warp;   // this token's index in the block
    const int region = kShared ? warp : 0;  // this warp's candidate region
    const int tid = kShared ? static_cast<int>(threadIdx.x) : lane;
    const int token = blockIdx.x * kTokensPerBlock + local;
    if (token >= rows) return;  // whole warps leave together
    RADIX4_STAMP(0);
    // The rank step reads whole steps of four entries of every region, so
    // entries past a region's count must hold 0, which is larger than no
    // composite. Cleared now, while the loads below are in flight.
    if constexpr (kRankMax > 0) {
        uint64_t* clear = cand_composite[local][region];
#pragma unroll
        for (int i = lane; i < kRankCap; i += kLanes) clear[i] = 0u;
        if constexpr (!kShared) L::sync();  // before other lanes write candidates here
    }

    // The token's threads meet: a barrier with several warps, else the warp's.
    auto token_sync = [&]() {
        if constexpr (kShared) {
            __syncthreads();
        } else {
            L::sync();
        }
    };

    // Sums over the token's threads. With several warps: each warp's sum
    // goes to shared memory, one barrier, every thread adds the warps'
    // parts in the same order. Alternating buffers make one barrier per
    // round enough: a warp can only overwrite a buffer after every warp has
    // passed the next barrier, hence finished reading it.
    int parity = 0;
    auto token_sum = [&](uint32_t v[8]) {
#pragma unroll
        for (int w = 0; w < 8; ++w) v[w] = L::sum(v[w]);
        if constexpr (kShared) {
            if (lane == 0) {
#pragma unroll
                for (int w = 0; w < 8; ++w) partial[parity][warp][w] = v[w];
            }
            __syncthreads();
#pragma unroll
            for (int w = 0; w < 8; ++w) v[w] = 0;
#pragma unroll
            for (int i = 0; i < kWarpsPerToken; ++i) {
#pragma unroll
                for (int w = 0; w < 8; ++w) v[w] += partial[parity][i][w];
            }
            parity ^= 1;
        }
    };

    // ---- load, sigmoid, rank keys ----
    const typename Score::Raw* row = scores + static_cast<int64_t>(token) * row_stride;
    float sig[kVals];
    uint32_t key[kVals];
    uint32_t vec_base[kSlots];  // aiter's vector rank of this thread's vectors, less the bank
    // Every load is issued before any is used, with no branch between them:
    // a thread without a last vector (kRagged) loads the token's last one
    // again and drops it. (Behind a branch, nvcc began the first vector's
    // sigmoid before issuing the second's loads: two trips to L2, not one.)
    float x[kVals], b[kVals];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
        const int g = tid + kThreads * s;
        const int at = !kRagged || s < kSlots - 1 || g < kGroups ? g : kGroups - 1;
        load4<Score, L, kVec>(row + 4 * at, x + 4 * s);
        load4<Bias, L, kVec>(bias + 4 * at, b + 4 * s);
        vec_base[s] = kDeviceTieTable<E>.vec_base[at & 63];
    }
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
        const bool here = !kRagged || s < kSlots - 1 || tid + kThreads * s < kGroups;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            sig[4 * s + i] = here ? sigmoid_denominator(x[4 * s + i]) : 1.0f;  // the reciprocal follows
            key[4 * s + i] = here ? L::as_uint(b[4 * s + i]) : 0u;            // bias bits until then
        }
    }
    // Reciprocals without a branch per value; the rare denominator at or
    // above the limit (sigmoid below 2^-126, or NaN) is redone exactly, in
    // one branch the warp takes together.
    bool beyond = false;
#pragma unroll
    for (int j = 0; j < kVals; ++j) {
        const float y = sig[j];
        beyond |= !(y < L::kReciprocalLimit);
        sig[j] = L::reciprocal(y);
    }
    if (__builtin_expect(L::any(beyond), 0)) {
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            const int g = tid + kThreads * s;
            if (!kRagged || s < kSlots - 1 || g < kGroups) {
                float again[4];  // loaded again rather than kept live in registers
                load4<Score, L, kVec>(row + 4 * g, again);
#pragma unroll
                for (int i = 0; i < 4; ++i) sig[4 * s + i] = contract_sigmoid<L>(again[i]);
            }
        }
    }
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
        const int g = tid + kThreads * s;
        if (!kRagged || s < kSlots - 1 || g < kGroups) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                key[4 * s + i] = rank_key_of_sum<L>(sig[4 * s + i] + L::as_float(key[4 * s + i]));
            }
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) sig[4 * s + i] = 0.0f;
        }
    }
    if (kShared && threadIdx.x == 0) winner_count = 0;  // ordered by the first barrier below
    RADIX4_STAMP(1);

    auto valid = [&](int j) -> bool { return !kRagged || j / 4 < kSlots - 1 || tid + kThreads * (j / 4) < kGroups; };
    auto expert_of = [&](int j) -> int32_t { return 4 * (tid + kThreads * (j / 4)) + (j & 3); };
    // Inverted tie priority: larger wins, like the key.
    auto inv_priority = [&](int j) -> uint32_t {
        const int g = tid + kThreads * (j / 4);
        const uint32_t priority = 4u * (vec_base[j / 4] + static_cast<uint32_t>(g >> 6)) + static_cast<uint32_t>(j & 3);
        return static_cast<uint32_t>(E - 1) - priority;
    };
    // key, inverted priority, expert id: ordered by the first two (priorities
    // are unique); the id rides along so that the rank step stores 8 bytes.
    auto composite = [&](int j) -> uint64_t {
        return (static_cast<uint64_t>(key[j]) << 32) | (inv_priority(j) << kPrioBits) | static_cast<uint32_t>(expert_of(j));
    };

    // ---- step 1: max and min of the keys, and the bound lo from the lane maxima ----
    uint32_t lane_max = 0u, lane_min = ~0u;
#pragma unroll
    for (int j = 0; j < kVals; ++j) {
        if (valid(j)) lane_max = key[j] > lane_max ? key[j] : lane_max, lane_min = key[j] < lane_min ? key[j] : lane_min;
    }
    uint32_t kmax = L::all_max(lane_max);
    uint32_t kmin = L::all_min(lane_min);
    // How many lanes of this group hold a larger maximum (every other lane,
    // by xor partner). The lanes with fewer than n larger hold the group's
    // n largest maxima, so the least of them, v_n, is the n-th largest, and
    // at least n keys of the group reach it.
    uint32_t larger = 0;
#pragma unroll
    for (int d = 1; d < kLanes; ++d) larger += static_cast<uint32_t>(L::shfl_xor(lane_max, d) > lane_max);
    auto nth_lane_max = [&](uint32_t n) { return L::all_min(larger < n ? lane_max : ~0u); };
    uint32_t lo = kShared ? 0u : nth_lane_max(K);  // with several groups, from the bounds below
    if constexpr (kShared) {
        // Bound m (m = 1..groups): every group has ceil(k / m) keys at or
        // above its v_ceil(k/m), so any m groups together have k; the m-th
        // largest of those values over the groups is a bound. lo = the
        // largest bound. (For sigmoid rows and four warps: about 25
        // candidates, against about 30 from bounds 1 and 4 alone.)
        if (lane == 0) partial[parity][warp][0] = kmax, partial[parity][warp][1] = kmin;
#pragma unroll
        for (int m = 1; m <= kWarpsPerToken; ++m) {
            const uint32_t v = nth_lane_max(static_cast<uint32_t>((K + m - 1) / m));
            if (lane == 0) partial[parity][warp][1 + m] = v;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < kWarpsPerToken; ++i) {
            const uint32_t mx = partial[parity][i][0], mn = partial[parity][i][1];
            kmax = mx > kmax ? mx : kmax, kmin = mn < kmin ? mn : kmin;
        }
#pragma unroll
        for (int m = 1; m <= kWarpsPerToken; ++m) {
            uint32_t v[kWarpsPerToken];  // sorted descending by an unrolled exchange sort
#pragma unroll
            for (int i = 0; i < kWarpsPerToken; ++i) v[i] = partial[parity][i][1 + m];
#pragma unroll
            for (int i = 0; i < kWarpsPerToken; ++i) {
#pragma unroll
                for (int t = kWarpsPerToken - 1; t > i; --t) {
                    const uint32_t hi = v[t] > v[t - 1] ? v[t] : v[t - 1], low = v[t] > v[t - 1] ? v[t - 1] : v[t];
                    v[t - 1] = hi, v[t] = low;
                }
            }
            lo = v[m - 1] > lo ? v[m - 1] : lo;
        }
        parity ^= 1;
    }
    RADIX4_STAMP(2);

    // A value wins iff (key >> kshift) > khi, or equal and valid and
    // (inv_priority >> qshift) >= qhi.
    uint32_t kshift = 0, khi = 0, qshift = 31, qhi = 0;
    bool ranked = false;  // the rank step placed the winners
    if (__builtin_expect(kmin == kmax, 0)) {
        // Every key is equal: the winners are the k first in tie priority.
        khi = kmax;
        qshift = 0;
        qhi = static_cast<uint32_t>(E - K);
    } else {
        if constexpr (kRankMax > 0) {
            // ---- step 2a: copy the keys >= lo, then rank each among them ----
            // This lane's share, and where it starts in the group's region
            // (a prefix sum over lanes from one ballot per bit of `mine`).
            uint32_t mine = 0;
#pragma unroll
            for (int j = 0; j < kVals; ++j) mine += static_cast<uint32_t>(valid(j) && key[j] >= lo);
            constexpr int kCountBits = kVals < 8 ? 3 : kVals < 16 ? 4 : kVals < 32 ? 5 : kVals < 64 ? 6 : 7;
            uint32_t at = 0, n = 0;
            const auto below = L::lanes_below();
#pragma unroll
            for (int bit = 0; bit < kCountBits; ++bit) {
                const auto m = L::ballot((mine >> bit) & 1u);
                at += static_cast<uint32_t>(__popcll(static_cast<uint64_t>(m & below))) << bit;
                n += static_cast<uint32_t>(__popcll(static_cast<uint64_t>(m))) << bit;
            }
            if (__builtin_expect(n <= static_cast<uint32_t>(kRankCap), 1)) {
                uint64_t* comp = cand_composite[local][region];
                float* csig = cand_sig[local][region];
#pragma unroll
                for (int j = 0; j < kVals; ++j) {
                    const bool take = valid(j) && key[j] >= lo;
                    L::store_shared_if(take, comp + at, composite(j));
                    L::store_shared_if(take, csig + at, sig[j]);
                    at += static_cast<uint32_t>(take);
                }
            }
            if (lane == 0) cand_count[local][region] = n;
            token_sync();
            RADIX4_STAMP(3);
            uint32_t longest = 0, count = 0;  // the largest region, and C
#pragma unroll
            for (int w = 0; w < kWarpsPerToken; ++w) {
                const uint32_t c = cand_count[local][w];
                longest = c > longest ? c : longest;
                count += c;
            }
            if (__builtin_expect(count <= static_cast<uint32_t>(kRankMax), 1)) {
                // One group ranks every candidate and writes the outputs;
                // the others are done (no further barrier).
                ranked = true;
                if (kShared && warp != 0) return;
                // Candidate i of the token (regions in order, entries in
                // order): its composite and its sigmoid.
                struct Found {
                    uint64_t composite;
                    float sig;
                };
                auto candidate = [&](uint32_t i) -> Found {
                    uint32_t r = 0;
#pragma unroll
                    for (int w = 0; w + 1 < kWarpsPerToken; ++w) {
                        const uint32_t cw = cand_count[local][w];
                        const bool past = r == static_cast<uint32_t>(w) && i >= cw;
                        i -= past ? cw : 0u;
                        r += static_cast<uint32_t>(past);
                    }
                    return Found{cand_composite[local][r][i], cand_sig[local][r][i]};
                };
                auto place = [&](bool is_candidate, uint32_t rank, uint64_t c, float sv) {
                    if (is_candidate && rank < static_cast<uint32_t>(K)) {
                        ranked_sig[local][rank] = sv;
                        ranked_id[local][rank] = static_cast<int32_t>(c & kIdMask);
                    }
                };
                if (count <= static_cast<uint32_t>(kLanes)) {
                    // One candidate per lane; its rank = how many lanes hold
                    // a larger composite. Lanes without one hold 0, smaller
                    // than every candidate (here lo > 0: lo = 0, the NaN
                    // key, would make every key a candidate).
                    const bool is_candidate = static_cast<uint32_t>(lane) < count;
                    const Found mine = is_candidate ? candidate(static_cast<uint32_t>(lane)) : Found{0u, 0.0f};
                    const uint64_t me = mine.composite;
                    uint32_t part[2] = {0, 0};  // two chains of adds, not one
#pragma unroll
                    for (int d = 1; d < kLanes; ++d) {
                        const uint32_t hi = L::shfl_xor(static_cast<uint32_t>(me >> 32), d);
                        const uint32_t low = L::shfl_xor(static_cast<uint32_t>(me), d);
                        part[d & 1] += static_cast<uint32_t>(((static_cast<uint64_t>(hi) << 32) | low) > me);
                    }
                    place(is_candidate, part[0] + part[1], me, mine.sig);
                } else {
                    // Up to kRankMax: a lane ranks two candidates per pass
                    // (first, first + kLanes) against every region, four
                    // entries of each per step (entries past a region's
                    // count are 0), in a loop not unrolled further to keep
                    // the code small; each entry read serves both.
                    for (uint32_t first = static_cast<uint32_t>(lane); first < count; first += 2 * kLanes) {
                        uint64_t me[2];
                        float msig[2];
                        uint32_t part[2][4];  // four chains of adds per candidate, not one
#pragma unroll
                        for (int t = 0; t < 2; ++t) {
                            const uint32_t i = first + static_cast<uint32_t>(t * kLanes);
                            const Found f = i < count ? candidate(i) : Found{~uint64_t{0}, 0.0f};  // nothing is larger
                            me[t] = f.composite, msig[t] = f.sig;
#pragma unroll
                            for (int e = 0; e < 4; ++e) part[t][e] = 0;
                        }
#pragma unroll 1
                        for (uint32_t q = 0; q < longest; q += 4) {
#pragma unroll
                            for (int w = 0; w < kWarpsPerToken; ++w) {
#pragma unroll
                                for (uint32_t e = 0; e < 4; ++e) {
                                    const uint64_t c = cand_composite[local][w][q + e];
#pragma unroll
                                    for (int t = 0; t < 2; ++t) part[t][e] += static_cast<uint32_t>(c > me[t]);
                                }
                            }
                        }
#pragma unroll
                        for (int t = 0; t < 2; ++t) {
                            const uint32_t rank = (part[t][0] + part[t][1]) + (part[t][2] + part[t][3]);
                            place(first + static_cast<uint32_t>(t * kLanes) < count, rank, me[t], msig[t]);
                        }
                    }
                }
            }
        }
        if (__builtin_expect(!ranked, 0)) {
            // ---- step 2b: radix select from the first bit where lo and max differ ----
            const uint32_t differ = lo ^ kmax;
            uint32_t needed = K;
            bool key_tied = true;  // whole keys tie at the cutoff: rank them by priority
            khi = kmax;            // (with differ == 0: at least k keys equal the max)
            // Radix rounds, 4 bits each, from digit position `shift` down:
            // digit(j, shift, base) is value j's digit there if its higher
            // digits equal `base`, else anything >= 16. Each round narrows
            // `hi` by the cutoff bin's digit and `needed` by the winners
            // above it. True when a cutoff bin holds exactly the winners
            // still needed (`shift` then names that round), false when the
            // digits ran out first.
            auto radix_rounds = [&](int& shift, uint32_t& hi, auto digit) -> bool {
                for (;;) {
                    const uint32_t base = hi << 4;
                    Histogram<L, kVals> round;
#pragma unroll
                    for (int j = 0; j < kVals; ++j) round.add(j, digit(j, shift, base));
                    uint32_t sums[8];
                    round.words(sums);
                    token_sum(sums);
                    const Pick r = pick_bin(sums, needed);
                    needed -= r.above;
                    hi = base | r.digit;
                    if (r.in_bin == needed) return true;
                    if (shift == 0) return false;
                    shift -= 4;
                }
            };
            if (differ != 0u) {
                int shift = (31 - L::count_leading_zeros(differ)) & ~3;
                uint32_t hi = shift >= 28 ? 0u : kmax >> (shift + 4);
                key_tied = !radix_rounds(shift, hi, [&](int j, int sh, uint32_t base) { return (key[j] >> sh) - base; });
                kshift = static_cast<uint32_t>(shift);  // 0 when key_tied: the rounds ran to the last digit
                khi = hi;
            }
            if (key_tied) {
                // `needed` of the keys equal to khi win, by tie priority.
                // Priorities are distinct, so by qs = 0 the bin holds exactly one.
                int qs = kPrioBits - 4;
                uint32_t qh = 0;
                radix_rounds(qs, qh, [&](int j, int sh, uint32_t base) {
                    return (valid(j) && key[j] == khi) ? (inv_priority(j) >> sh) - base : 16u;
                });
                qshift = static_cast<uint32_t>(qs);
                qhi = qh;
            }
        }
    }

    if (__builtin_expect(!ranked, 0)) {
        // ---- gather the k winners, then place each by its rank ----
        uint64_t won = 0;
#pragma unroll
        for (int j = 0; j < kVals; ++j) {
            const uint32_t top = key[j] >> kshift;
            const bool win = top > khi || (top == khi && valid(j) && (inv_priority(j) >> qshift) >= qhi);
            won |= static_cast<uint64_t>(win) << j;
        }
        const uint32_t n_won = static_cast<uint32_t>(__popcll(won));
        uint32_t slot;
        if constexpr (kShared) {
            // Slots in arrival order: the placement below does not depend on it.
            slot = n_won ? atomicAdd(&winner_count, n_won) : 0u;
        } else {
            slot = L::exclusive_scan(n_won);
        }
        Entry* mine = winners[local];
#pragma unroll
        for (int j = 0; j < kVals; ++j) {
            if ((won >> j) & 1u) mine[slot++] = Entry{composite(j), sig[j], expert_of(j)};
        }
        token_sync();
        if (kShared && warp != 0) return;
        if (lane < K) {
            const Entry w = mine[lane];
            int rank = 0;
#pragma unroll
            for (int i = 0; i < K; ++i) rank += mine[i].composite > w.composite;
            ranked_sig[local][rank] = w.sig;
            ranked_id[local][rank] = w.id;
        }
        L::sync();
    } else {
        L::sync();  // the ranking group's placements, before its reads below
    }

    RADIX4_STAMP(4);

    // ---- weights, in output order; the total is summed in that order too ----
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < K; ++i) total += ranked_sig[local][i];
    if (lane < K) {
        float weight = ranked_sig[local][lane];
        if (renormalize && total > 0.0f) weight = weight / total;
        weight = weight * routed_scaling_factor;
        const int64_t at = static_cast<int64_t>(token) * K + lane;
        weights[at] = weight;
        ids[at] = ranked_id[local][lane];
    }
    RADIX4_STAMP(5);
}

}  // namespace radix4
