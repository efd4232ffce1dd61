// Radix-4 MoE router top-k: one algorithm for CUDA (warp32) and HIP (wave64),
// two routing contracts.
//
// What it computes, as plain torch. Contract `aiter` (docs/contracts.md#contract-aiter,
// AiterContract below):
//
//     sig = 1 / (1 + exp2(-log2(e) * scores.float()))       # IEEE division
//     r   = sig + bias.float()                              # ranks only
//     key = rank_key(r)          # order-preserving, -0 == +0, NaN -> 0
//     ids = the topk experts by (key desc, tie priority asc)
//     w   = sig[ids]; if renormalize and w.sum() > 0: w = w / w.sum()
//     w   = w * routed_scaling_factor
//
// with aiter's wave64 traversal order as the tie priority (tie_order.h).
// Contract `serial` (docs/contracts.md#contract-serial, SerialContract below), bit for bit the
// serial scan of kernels/serial:
//
//     sig = 1 / (1 + exp(-scores.float()))                  # plain expf, IEEE division
//     r   = sig + bias.float()
//     ids = the experts with r > -1e30 (NaN never) by (r desc, index asc),
//           then expert 0 for every slot left                # selection order
//     w   = sig[ids]                                        # expert 0's sig again
//     w   = (w / (w.sum() + 1e-20)) * rs if renormalize else w * rs
//
// Both sum the weights in output order, in fp32.
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
// hold a key at least that large); for sigmoid scores only a few dozen
// keys reach it (kernels/radix4/lab/radix4_bound_sim.py; docs/radix4_tuning.md).
// Those keys are copied to shared memory, where each is ranked by counting
// the larger composites. The rank is the output position.
//
// When the set is too large (many keys tied near the max, NaN rows, rows
// with fewer than k experts above the serial floor), a radix select over
// the composite takes over, 4 bits per round: every round builds a 16-bin
// histogram of the current digit of the remaining candidates, sums it over
// the token's threads and finds the bin holding the cutoff. It starts at
// the first bit where the bound and the max differ, stops as soon as the
// cutoff bin holds exactly the winners still needed, and visits the
// tie-priority digits only when whole rank keys tie at the cutoff. Its
// winners are written to shared memory in any order and each of the first
// k lanes places one by its rank among the winners. Either way the output
// order is (key desc, tie priority asc) and the total is summed in that
// order.
//
// Launch shape: either a block per token (kWarpsPerToken warps, grid = M;
// the low-latency choice for small batches) or a warp per token
// (kTokensPerBlock warps per block, grid = ceil(M / kTokensPerBlock)); the
// entry point picks by M (radix4_entry.h). Static shared memory: about
// 28 * k * kTokensPerBlock + 12 * RADIX4_RANK_MAX * kWarpsPerToken *
// kTokensPerBlock bytes. No fast math anywhere: the sigmoid must round like
// the contract's so that ids stay comparable (on CUDA its reciprocal is a
// branch-free sequence that is exact below 2^126, checked for every input by
// kernels/radix4/lab/radix4_sigmoid_exhaustive.cu).
//
// Programmatic dependent launch (CUDA sm_90+, radix4_entry.h): the kernel
// lets its dependents launch at entry and waits for the grids before it
// (L::wait_for_prior_grids) right before its first load of the logits;
// only the constant tie table is read before that wait. In a plain launch
// both are no-ops.
#pragma once

#include <stdint.h>

#include <type_traits>

#include "tie_order.h"

// No contraction into fused multiply-adds: the contracts round every step.
// (nvcc has no such pragma: its builds pass -fmad=false.)
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

// The switches come before every use: an `#if` of a name not yet defined
// reads 0, which once left RADIX4_EX2_FTZ off in every default build.
// Largest candidate set the rank step takes (RankStep); larger sets go
// through the radix rounds. 0 turns the rank step off (benchmarks).
#ifndef RADIX4_RANK_MAX
#define RADIX4_RANK_MAX 128
#endif
// Tuning switches (0 or 1 unless said; the defaults are the measured choice,
// docs/radix4_tuning.md has the measurements; every setting gives the same
// bits):
//   RADIX4_EX2_FTZ         aiter's exp2 as the flushed hardware exp2
//   RADIX4_COPY_ENTRY16    candidates as 16-byte entries, one store each
//   RADIX4_SORTED_BOUND    the lane maxima sorted by a bitonic network (fewer
//                          instructions, a longer dependent chain) instead
//                          of counted by every lane against every lane
//   RADIX4_PDL_LATE_TRIGGER  the warp-per-token shape lets its dependents
//                          launch before its write step, not at entry (a
//                          dependent launched early holds SM slots that the
//                          rest of a one-wave grid's blocks could balance)
//   RADIX4_RANK_KEY32      the rank step's one-candidate-per-lane pass
//                          compares 32-bit rank keys (31 shuffles, not 62);
//                          equal keys among the candidates (seen as a rank
//                          sum short of 0 + 1 + .. + (C - 1)) redo the pass
//                          with the whole composites
//   RADIX4_RANK_PACKED     before that pass: when the token's keys above lo
//                          span fewer than 2^(32 - S::kPackBits) values,
//                          each candidate's key - lo and inverted tie
//                          priority pack into one 32-bit word that no other
//                          candidate shares, and one pass of 31 shuffles
//                          ranks every candidate (no sum to check, no redo
//                          for equal keys)
//   RADIX4_COPY_MASK       the copy step marks its candidates as bits of one
//                          word and counts them by popcount instead of
//                          summing 28 compares in a chain (H200 step clocks
//                          of a warp per token: copy 937 -> 690 cycles)
//   RADIX4_COPY_CURSOR     the copy step counts its candidates by carries
//                          (L::add_if_at_least) and stores each through a
//                          cursor (L::store_if_at_least: a compare, a
//                          predicated store, a predicated add): no mask to
//                          pick apart, no select chain for the address;
//                          RADIX4_COPY_MASK then has no effect
//   RADIX4_COPY_CURSORS    1, 2 or 4 cursors for that copy, each storing
//                          every 1st, 2nd or 4th value (a store reads its
//                          address late: one cursor's predicated step after
//                          each store waits for that read)
//   RADIX4_APPROXIMATE_KEYS  the contracts aiter and serial, where the lanes
//                          have a tanh instruction (CUDA): every value gets
//                          an approximate key (one MUFU op, no reciprocal),
//                          the bound and the copy run on those with a margin
//                          that covers their error, and only the candidates
//                          get the contract's sigmoid and key, in the rank
//                          step (approximate_key, Rescore); 0 nowhere, 1 in
//                          every launch shape, 2 the warp-per-token shapes,
//                          3 (the default) the dense kernel only
// and RADIX4_WARP_MIN_BLOCKS, the warp-per-token kernel's minimum blocks per
// SM for ptxas: the register cap that sets how many warps fit an SM (1: no
// cap, no spills). The entry point also has a dense warp-per-token kernel
// for batches that fill more than one wave (RADIX4_DENSE_MIN_BLOCKS,
// radix4_entry.h): route_kernel's kMinBlocks.
#ifndef RADIX4_EX2_FTZ
#define RADIX4_EX2_FTZ 1
#endif
#ifndef RADIX4_COPY_ENTRY16
#define RADIX4_COPY_ENTRY16 1
#endif
#ifndef RADIX4_SORTED_BOUND
#define RADIX4_SORTED_BOUND 0
#endif
#ifndef RADIX4_PDL_LATE_TRIGGER
#define RADIX4_PDL_LATE_TRIGGER 1
#endif
#ifndef RADIX4_WARP_MIN_BLOCKS
#define RADIX4_WARP_MIN_BLOCKS 1
#endif
#ifndef RADIX4_RANK_KEY32
#define RADIX4_RANK_KEY32 1
#endif
#ifndef RADIX4_RANK_PACKED
#define RADIX4_RANK_PACKED 1
#endif
#ifndef RADIX4_COPY_MASK
#define RADIX4_COPY_MASK 1
#endif
#ifndef RADIX4_COPY_CURSOR
#define RADIX4_COPY_CURSOR RADIX4_COPY_ENTRY16  // on with the 16-byte entries it stores
#endif
#ifndef RADIX4_COPY_CURSORS
#define RADIX4_COPY_CURSORS 4
#endif
#ifndef RADIX4_APPROXIMATE_KEYS
#define RADIX4_APPROXIMATE_KEYS 3
#endif
#if RADIX4_COPY_CURSORS != 1 && RADIX4_COPY_CURSORS != 2 && RADIX4_COPY_CURSORS != 4
#error "RADIX4_COPY_CURSORS must be 1, 2 or 4 (the copy count's four chains split among the cursors)"
#endif
#if RADIX4_COPY_CURSOR && !RADIX4_COPY_ENTRY16
#error "RADIX4_COPY_CURSOR stores 16-byte entries: it needs RADIX4_COPY_ENTRY16=1"
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

// fp16 is read as its 16 raw bits and widened exactly by integer steps (no
// fp16 header either): normal numbers rebias the exponent, subnormals are
// their 10-bit mantissa times 2^-24 (exact in fp32), inf and NaN keep theirs.
struct F16 {
    using Raw = uint16_t;
    template <class L>
    static __device__ __forceinline__ float widen(Raw bits) {
        const uint32_t h = bits, sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
        if (exponent == 0u) return L::as_float(sign | L::as_uint(static_cast<float>(mantissa) * 0x1p-24f));
        const uint32_t e32 = exponent == 0x1fu ? 0xffu : exponent + 112u;
        return L::as_float(sign | (e32 << 23) | (mantissa << 13));
    }
};

// Four consecutive experts, widened. kVec 1: one 8- or 16-byte load (the host
// checks alignment); 0: four scalar loads. (kVec 2, in Slice: either, by the
// row's and the bias's alignment, tested in the kernel: one build for both.)
template <class T, class L, int kVec>
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

// ---- the float-to-key twiddle ----

// An order-preserving map of fp32 onto uint32: negative floats have all
// bits flipped, others only the sign bit. -0.0 and +0.0 get different keys
// here, and need not get one: the kernel only maps r = sig + bias with
// sig >= +0, and in round to nearest such a sum is never -0 (+0 + -0 = +0,
// x + -x = +0). NaN is each contract's to map (rank_key below).
template <class L>
__device__ __forceinline__ uint32_t ordered_bits(float r) {
    const uint32_t bits = L::as_uint(r);
    const uint32_t flip = static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) | 0x80000000u;
    return bits ^ flip;
}

// ---- the contracts: sigmoid, rank keys, tie priority, weights ----
//
// A contract is a policy of static members:
//   denominator<L>(x)      1 + exp(-x) in the contract's form; the sigmoid is
//                          its IEEE reciprocal (contract_sigmoid)
//   rank_key<L>(r)         the key of ranking value r; 0 for a value that only
//                          fills slots (aiter's NaN) or never wins (serial)
//   kFillWithExpertZero    winners of key 0 leave as expert 0 with its sig
//   vector_priority<E>(g)  the tie priority of vector g's first expert (the
//                          other three follow it); lower wins
//   weight(sig, total, renormalize, rs)

// The scores of the lowest-index contracts (LowestContract): the sigmoid of
// the aiter contract, or DeepSeek-V4's sqrt(softplus(x)).
// kChosen: either, by bit 4 of the kernel's `mode` (radix4_entry.h's
// RADIX4_SQRT_SOFTPLUS flag), so that one build serves both.
enum class ScoreFn : int { kSigmoid = 0, kSqrtSoftplus = 1, kChosen = 2 };

// In global memory, not __constant__: lanes read different entries, which
// the constant cache would serialize.
template <int E>
__device__ const TieTable<E> kDeviceTieTable = make_tie_table<E>();

struct AiterContract {
    static constexpr bool kFillWithExpertZero = false;  // NaN experts fill the slots numbers leave
    static constexpr ScoreFn kScore = ScoreFn::kSigmoid;
    static constexpr int kGroups = 1;  // no expert groups
    static constexpr bool kLaunchShapes = true;  // the Kimi shapes build all three launch shapes (radix4_entry.h)
    static constexpr bool kRoundedSigmoid = false;  // aiter's own fp32 form (denominator)
    // aiter's form of the sigmoid, 1 / (1 + exp2(-log2(e) * x)); exp2f is
    // the accurate library version because no fast-math flag is given. With
    // RADIX4_EX2_FTZ, L::exp2_flushed (ftz) instead: it differs from exp2f
    // only where exp2f is below 2^-126, and 1 + such a value is 1 either way,
    // so the denominator has the same bits (checked for every x by
    // kernels/radix4/lab/radix4_sigmoid_exhaustive.cu) for fewer instructions.
    template <class L>
    static __device__ __forceinline__ float denominator(float x) {
        constexpr float kNegLog2e = -1.44269504088896340736f;
#if RADIX4_EX2_FTZ
        return 1.0f + L::exp2_flushed(kNegLog2e * x);
#else
        return 1.0f + exp2f(kNegLog2e * x);
#endif
    }
    // Every NaN maps to 0, below the key of -inf (0x007fffff), so NaN never
    // displaces a number.
    template <class L>
    static __device__ __forceinline__ uint32_t rank_key(float r) {
        return r != r ? 0u : ordered_bits<L>(r);
    }
    // The least key rank_key keeps as ordered_bits (every number's; NaN of
    // either sign maps outside [lowest_key, key of +inf]).
    template <class L>
    static __device__ __forceinline__ uint32_t lowest_key() { return ordered_bits<L>(-__builtin_huge_valf()); }
    template <int E>
    static __device__ __forceinline__ uint32_t vector_priority(int g) {
        return 4u * (kDeviceTieTable<E>.vec_base[g & 63] + static_cast<uint32_t>(g >> 6));
    }
    static __device__ __forceinline__ float weight(float sig, float total, int renormalize, float rs) {
        float w = sig;
        if (renormalize && total > 0.0f) w = w / total;
        return w * rs;
    }
};

struct SerialContract {
    static constexpr bool kFillWithExpertZero = true;  // the scan's expert 0 when nothing beats the floor
    static constexpr ScoreFn kScore = ScoreFn::kSigmoid;
    static constexpr int kGroups = 1;
    static constexpr bool kLaunchShapes = true;
    static constexpr bool kRoundedSigmoid = false;  // the scan's expf form
    template <class L>
    static __device__ __forceinline__ float denominator(float x) { return 1.0f + expf(-x); }
    // Only values above the scan's -1e30 sentinel can win (NaN fails the
    // compare); every other value gets key 0, below every winner.
    static constexpr float kSentinel = -1e30f;
    template <class L>
    static __device__ __forceinline__ uint32_t rank_key(float r) {
        return r > kSentinel ? ordered_bits<L>(r) : 0u;
    }
    // The least key rank_key keeps as ordered_bits: the next value above the
    // sentinel's.
    template <class L>
    static __device__ __forceinline__ uint32_t lowest_key() { return ordered_bits<L>(kSentinel) + 1u; }
    template <int E>
    static __device__ __forceinline__ uint32_t vector_priority(int g) {
        return 4u * static_cast<uint32_t>(g);  // lowest index wins
    }
    static __device__ __forceinline__ float weight(float sig, float total, int renormalize, float rs) {
        constexpr float kDenominatorEpsilon = 1e-20f;
        return renormalize ? (sig / (total + kDenominatorEpsilon)) * rs : sig * rs;
    }
};

// sqrt(softplus(x)) as the oracle computes it (oracle/_scores.py's
// sqrt_softplus_rows): in float64, max(x, 0) + log1p(exp(-|x|)), +inf at
// +inf, the square root, then one rounding to fp32. Each float64 step is
// within an ulp of float64 (the device's libm), so the fp32 result is the
// oracle's unless the exact value lies within about 2^-50 of its own size
// from an fp32 rounding midpoint; then the two differ by one fp32 ulp
// (docs/radix4_models.md).
// Out of line: its float64 exp and log1p are long, and inlined at every value
// of both score paths they multiplied the build's code (and its compile time).
__device__ __noinline__ float sqrt_softplus(float x) {
    const double x64 = static_cast<double>(x);
    const double soft = x64 == __builtin_huge_val() ? x64 : (x64 > 0.0 ? x64 : 0.0) + log1p(exp(-fabs(x64)));
    return static_cast<float>(sqrt(soft));
}

// The model contracts (docs/radix4_models.md): the correctly rounded sigmoid
// (rounded_sigmoid; or sqrt(softplus(x)) with kScore), NaN below every number (key 0, as
// aiter), ties to the lowest expert index, and the weights divided by the
// chosen sum plus 1e-20 (renormalize 1) or by the raw sum (renormalize 2),
// then scaled. With kGroups_ > 1: the experts form kGroups_ contiguous
// groups; a group scores the sum of its two largest ranking values (NaN
// lowest, so a group holding fewer than two numbers scores NaN); the
// kTopkGroups groups with the largest scores (ties to the lower group, NaN
// last) are kept, and every expert of the other groups ranks as kMaskZero ?
// 0.0 : -inf (GroupStep below).
template <ScoreFn kScore_ = ScoreFn::kSigmoid, int kGroups_ = 1, int kTopkGroups_ = 1, bool kMaskZero_ = false>
struct LowestContract {
    static constexpr bool kFillWithExpertZero = false;
    static constexpr ScoreFn kScore = kScore_;
    static constexpr int kGroups = kGroups_, kTopkGroups = kTopkGroups_;
    static constexpr bool kMaskZero = kMaskZero_;
    static constexpr bool kLaunchShapes = false;  // a warp per token at every shape and batch
    static constexpr bool kRoundedSigmoid = true;  // the sigmoid correctly rounded (rounded_sigmoid)
    static_assert(kGroups >= 1 && kTopkGroups >= 1 && kTopkGroups <= kGroups, "1 <= topk_group <= n_group");
    template <class L>
    static __device__ __forceinline__ float denominator(float x) { return AiterContract::denominator<L>(x); }
    template <class L>
    static __device__ __forceinline__ uint32_t rank_key(float r) { return AiterContract::rank_key<L>(r); }
    template <class L>
    static __device__ __forceinline__ uint32_t lowest_key() { return AiterContract::lowest_key<L>(); }
    template <int E>
    static __device__ __forceinline__ uint32_t vector_priority(int g) { return 4u * static_cast<uint32_t>(g); }
    static __device__ __forceinline__ float weight(float sig, float total, int renormalize, float rs) {
        constexpr float kDenominatorEpsilon = 1e-20f;
        const int rule = renormalize & 3;  // bit 4 is the score's (kChosen)
        if (rule == 0) return sig * rs;
        return (sig / (rule == 2 ? total : total + kDenominatorEpsilon)) * rs;
    }
};

// The model contracts the C entries serve (radix4.cu / radix4.hip).
using ModelContract = LowestContract<ScoreFn::kChosen>;                 // sigmoid or sqrt(softplus(x)), + bias
using GroupedContract = LowestContract<ScoreFn::kSigmoid, 8, 4, false>;  // deepseek-v3
using GroupedZeroContract = LowestContract<ScoreFn::kSigmoid, 8, 4, true>;  // deepseek-v3-reference: dropped groups rank 0.0

// The model contracts' sigmoid (sigmoid_formula "correctly_rounded"), as the
// oracle computes it (oracle/_scores.py's _sigmoid_exact): e = exp(-x) in
// float64, 1 / (1 + e) in float64 rounded once to fp32, and 0 where e would
// round to an fp32 inf (x below about -88.72), as every fp32 formula gives.
// The same float64 steps as the oracle's on a CUDA device, so the same bits
// there; elsewhere, one fp32 ulp apart at most where the value lies within
// about 2^-50 of its size from an fp32 rounding midpoint. (aiter's fp32 form
// is a few ulp off at times: harmless at the cutoff, where the near-tie
// bound excuses it, but it also moved group scores across a group tie.)
__device__ __noinline__ float rounded_sigmoid(float x) {
    constexpr double kFp32Overflow = 0x1.ffffffp+127;  // 2^128 - 2^103: from here up e rounds to fp32 inf
    const double e = exp(-static_cast<double>(x));
    return e >= kFp32Overflow ? 0.0f : static_cast<float>(1.0 / (1.0 + e));
}

// IEEE 1 / y out of line: only the rare denominators at or above
// L::kReciprocalLimit come here, and one copy of the division keeps the
// hot path's code short (the kernel runs each instruction about once, so
// its code size is instruction-cache time).
__device__ __noinline__ float ieee_reciprocal(float y) { return 1.0f / y; }

// The contract's sigmoid: L::reciprocal is exact below L::kReciprocalLimit.
template <class C, class L>
__device__ __forceinline__ float contract_sigmoid(float x) {
    const float y = C::template denominator<L>(x);
    return y < L::kReciprocalLimit ? L::reciprocal(y) : ieee_reciprocal(y);
}

// ---- approximate keys: the contract's sigmoid for the candidates only ----
//
// A key r = sig + b needs the contract's sigmoid: an exp2, a reciprocal with
// its Newton step, about 15 instructions and two MUFU ops a value. The
// selection needs it only near the k-th largest key. So with
// kApproximateKeys every value first gets
//   a = tanh(x / 2) + 2 b   (L::tanh_approx: one MUFU op; a fused add)
// which, as 2 sig - 1 = tanh(x / 2), lies near rho = 2 r - 1, an increasing
// function of r. With |tanh_approx(x / 2) - (2 sig(x) - 1)| <= delta for
// every x (kApproximateKeyBound, checked for all 2^32 inputs against both
// contracts' sigmoids on the device) and the roundings of a and of r
// (2^-24 of |a| and of 2 |r| <= |rho| + 1), |a - rho| <= delta + 2^-23 (|a|
// + 1) + delta 2^-23 within the values that matter, those with |a| <= M, M
// the larger of |lo|, |kmax| (the worst non-candidate lies just below the
// threshold; the error falls with a, below it). E = 2 delta + 2^-20 (M + 2)
// covers that with room for the roundings of the uniform arithmetic below
// (each within 2^-24 of sizes E is 2^-20 of):
//   the bound step on the approximate keys gives lo, with k values a >= lo;
//   so the k-th largest rho, T, is >= lo - E;
//   every value with rho >= T (every winner, every tie at the cutoff) has
//   a >= lo - 2E: the copy takes every a >= lo - 2E (at least k values);
//   every other value has rho < lo - E <= T: it neither wins nor ties.
// The rank step then scores each candidate exactly (Rescore) and ranks the
// candidates by their composites, which gives the same winners in the same
// order as ranking every value. A token takes the exact way for every
// value (exact_keys, then the bound and the copy again) when a key is NaN
// or past 2^90 in size (lo, kmax or E would not be finite, the serial floor
// could matter), or when more than RADIX4_RANK_MAX values reach lo - 2E
// (ties, levels): kmax then carries NaN as a key above every number's.
// Which launches: RADIX4_APPROXIMATE_KEYS 1 every launch shape, 2 the
// warp-per-token shapes, 3 the dense kernel only (kMinBlocks > 1). On the
// H200 the rank step's scoring of its candidate (a shared read, then the
// logit and bias from L1, then the sigmoid: about 370 cycles on a token's
// critical path) costs more than the keys step saves wherever a launch is
// one token's latency (every shape below the dense switch), and less where
// it is throughput (the dense kernel, 896/16, M = 4096: 6.70 against 6.93
// us, 6.20 against 6.45 with PDL; docs/radix4_tuning.md).
template <class S, class C, class L, int kMinBlocks>
constexpr bool kApproximateKeys = RADIX4_APPROXIMATE_KEYS && (RADIX4_APPROXIMATE_KEYS != 2 || S::kWarps == 1) &&
                                  (RADIX4_APPROXIMATE_KEYS != 3 || kMinBlocks > 1) && RADIX4_COPY_CURSOR &&
                                  RADIX4_RANK_MAX > 0 && L::kApproximateKeys && C::kScore == ScoreFn::kSigmoid &&
                                  !C::kRoundedSigmoid && C::kGroups == 1;
// delta: 2^-10 is the PTX manual's bound for tanh.approx.f32 on every
// architecture. RADIX4_APPROXIMATE_KEY_BOUND sets another for a measurement
// (the H200's largest error is 2^-16.93, radix4_sigmoid_exhaustive.cu): a
// build whose bound a device breaks gives wrong winners there, and that
// check, which reads this constant, fails on it.
#ifndef RADIX4_APPROXIMATE_KEY_BOUND
#define RADIX4_APPROXIMATE_KEY_BOUND 0x1p-10f
#endif
constexpr float kApproximateKeyBound = RADIX4_APPROXIMATE_KEY_BOUND;
constexpr float kApproximateKeyLimit = 0x1p90f;

template <class L>
__device__ __forceinline__ float approximate_key(float x, float b) {
    return L::fma(2.0f, b, L::tanh_approx(0.5f * x));  // 2 b is exact: one rounding, as t + 2 b
}

// A candidate's exact score and composite. With approximate keys the copy
// stores only a candidate's low word (inverted tie priority << 12 | id), and
// the rank step scores it here: its logit and bias read again (the row was
// just read), the contract's sigmoid and rank key, as exact_keys computes
// them. Without (NoRescore) the copy stores the exact composite and sig.
struct Scored {
    uint64_t composite;
    float sig;
};
template <class S, class L, class C, class Score, class Bias>
struct Rescore {
    static constexpr bool kRescores = true;
    const typename Score::Raw* row;
    const typename Bias::Raw* bias;

    __device__ __forceinline__ float sig(int expert) const {
        return contract_sigmoid<C, L>(Score::template widen<L>(row[expert]));
    }
    __device__ __forceinline__ Scored operator()(uint32_t low_word) const {
        const int expert = static_cast<int>(low_word & S::kIdMask);
        const float sig_e = sig(expert);
        const uint32_t key = C::template rank_key<L>(sig_e + Bias::template widen<L>(bias[expert]));
        return Scored{(static_cast<uint64_t>(key) << 32) | low_word, sig_e};
    }
};
struct NoRescore {
    static constexpr bool kRescores = false;
};

// ---- the model contracts' float64 scores, decided in a few float64 steps ----
//
// rounded_sigmoid and sqrt_softplus above are the oracle's formulas through
// the device's float64 libm, called out of line: a chain of a few hundred
// float64 cycles per value, one value after another (3-6 us a launch at
// M = 1). What the contract asks for is only the fp32 rounding of a float64
// value, and that is decided by any approximation whose error is well below
// the distance to the nearest fp32 rounding midpoint. So the fast forms:
//   1. compute the float64 value v with short polynomials (relative error
//      below 2^-44.5 against the exact function, error budget below; the
//      oracle's float64 value is within 2^-51 of it);
//   2. read v's low 29 significand bits, the ones rounding to fp32 drops:
//      when they are more than 2^11 of v's ulps (at least 2^-42 v) from the
//      rounding midpoint, the exact value, the oracle's and the libm form's
//      all round to v's fp32 rounding, which is returned;
//   3. otherwise (v within 2^-42 of a midpoint: about one value in 2^17),
//      and outside the fast forms' ranges (NaN, infinities, the far tails),
//      the out-of-line libm form.
// So the fast forms return the libm forms' bits for every input
// (kernels/radix4/lab/radix4_model_scores_exhaustive.cu compares all 2^32
// inputs on the device). Four values a call (model_scores), out of line:
// their chains overlap, and one copy of the code serves every kernel of the
// build. (Eight a call measured slower on the H200: 2.80 against 2.60 us for
// deepseek-v3 at M = 1.) Conversions between fp32 and float64 issue at a
// quarter of the float64 rate on the H200, so the forms use none but the
// input's and the result's: the rounding decided from v's bits, rint and 2^n
// by adding 1.5 * 2^52 and by the exponent field, the reciprocal's and the
// root's seeds in float64 (2-8 % a launch against the conversions' forms,
// reports/baselines/h200-issue38-lean-scores/).
//
// Error budget (relative, against the exact function):
//   e^y, |y| <= 87.5: y log2(e) split exactly into n + f, |f| <= 1/2, with
//     the product's rounding error carried (fma) and log2(e) to 106 bits:
//     f within 2^-53; 2^f by its Taylor polynomial of degree 11: truncation
//     below 2^-46.6 ((0.5 ln 2)^12 / 12! / 2^-0.5), Horner's rounding below
//     2^-51; times 2^n exactly. Below 2^-46.
//   sigmoid, 1 / (1 + e): 1 + e rounded (2^-53); the reciprocal from a
//     seed within 2^-16 and one step of third order (cubes it: 2^-48).
//     Below 2^-45 in all.
//   log1p(u), u = e^-|x| in (0, 1]: 2 atanh(z), z = u / (2 + u) in (0, 1/3]
//     (u's error passes through at most once: log1p(u) >= u / (1 + u)); z
//     from that reciprocal and one Newton step (2^-47); the series to
//     z^25 / 25 (truncation below 2^-46), Horner below 2^-51. softplus adds
//     max(x, 0) (no cancellation), the sqrt halves the error and adds
//     below 2^-52 (sqrt_of_normal): below 2^-44.5.
namespace fast64 {

constexpr double kLog2e = 0x1.71547652b82fep+0, kLog2eLow = 0x1.777d0ffda0d24p-56;  // log2(e) = sum, 106 bits
// decided's margin around an fp32 rounding midpoint, in v's ulps (2^-52 of its binade): 2^11 of them are at
// least 2^-42 v, well above the 2^-44.5 of the fast forms and the oracle's 2^-51.
constexpr uint32_t kMidpointMargin = 1u << 11;
// c_n x^n + ... + c_0 by Horner's rule, the coefficients highest first: one fma a coefficient.
__device__ __forceinline__ double horner(double, double c0) { return c0; }
template <class... Rest>
__device__ __forceinline__ double horner(double x, double c, double next, Rest... rest) {
    return horner(x, fma(c, x, next), rest...);
}

// 2^f = exp(f ln 2) by Taylor's polynomial of degree 11: coefficients (ln 2)^k / k!, k = 11..0.
__device__ __forceinline__ double exp2_taylor(double f) {
    return horner(f, 0x1.e8cac7351bb25p-32,
                  0x1.e4cf5158b8ecap-28,
                  0x1.b5253d395e7c4p-24,
                  0x1.62c0223a5c824p-20,
                  0x1.ffcbfc588b0c7p-17,
                  0x1.430912f86c787p-13,
                  0x1.5d87fe78a6731p-10,
                  0x1.3b2ab6fba4e77p-7,
                  0x1.c6b08d704a0c0p-5,
                  0x1.ebfbdff82c58fp-3,
                  0x1.62e42fefa39efp-1,
                  0x1p+0);
}

// atanh(z) / z = sum z^2k / (2k + 1), k = 0..12, in z2 = z^2 (coefficients k = 12..0).
__device__ __forceinline__ double atanh_series(double z2) {
    return horner(z2, 0x1.47ae147ae147bp-5,
                  0x1.642c8590b2164p-5,
                  0x1.8618618618618p-5,
                  0x1.af286bca1af28p-5,
                  0x1.e1e1e1e1e1e1ep-5,
                  0x1.1111111111111p-4,
                  0x1.3b13b13b13b14p-4,
                  0x1.745d1745d1746p-4,
                  0x1.c71c71c71c71cp-4,
                  0x1.2492492492492p-3,
                  0x1.999999999999ap-3,
                  0x1.5555555555555p-2,
                  0x1p+0);
}

// 1.5 * 2^52: t + kRoundShift rounds t (|t| < 2^31) to the nearest integer,
// ties to even (the sum's ulp is 1), and leaves that integer in the low word.
constexpr double kRoundShift = 0x1.8p52;

// e^y for |y| <= 87.5 (2^n stays a normal float64, and so does the result,
// so 2^n is a sum into its exponent field).
template <class L>
__device__ __forceinline__ double exp(double y) {
    const double t = y * kLog2e;
    const double t_low = fma(y, kLog2eLow, fma(y, kLog2e, -t));  // the product's rounding error, and log2(e)'s tail
    const double shifted = t + kRoundShift;
    const double n = shifted - kRoundShift;  // rint(t), exactly
    const double f = (t - n) + t_low;        // t - n is exact
    const int32_t n_int = static_cast<int32_t>(static_cast<uint32_t>(L::bits64(shifted)));
    const uint64_t scale = static_cast<uint64_t>(static_cast<int64_t>(n_int)) << 52;  // n in the exponent field
    return L::from_bits64(L::bits64(exp2_taylor(f)) + scale);
}

// 1 / d for 1 <= d < 2^126: the back end's float64 seed r, then one step
// of third order, r (1 + e + e^2) with e = 1 - d r: the error goes from e to
// about e^3, so any seed within 2^-16 ends within 2^-47.
template <class L>
__device__ __forceinline__ double reciprocal(double d) {
    const double r = L::reciprocal64_seed(d);
    const double e = fma(-d, r, 1.0);
    return fma(r, fma(e, e, e), r);
}

// sqrt(v) for v in [2^-126, 2^126): the back end's float64 1 / sqrt seed y0
// (relative error s), one Newton step for it (about 1.5 s^2), one for the
// root (about the square of that): any seed within 2^-16 ends below 2^-52.
// No branch: the IEEE float64 sqrt calls a slow path out of line for special
// inputs, and a call between the chains of model_scores serializes them.
template <class L>
__device__ __forceinline__ double sqrt_of_normal(double v) {
    const double y0 = L::rsqrt64_seed(v);
    const double y = fma(0.5 * y0, fma(-v * y0, y0, 1.0), y0);
    const double q = v * y;
    return fma(fma(-q, q, v), 0.5 * y, q);
}

// v rounded to fp32 (v in [2^-126, 2^126), where fp32 is normal), and
// whether every value within 2^-42 v of v rounds the same. Rounding to fp32
// drops the low 29 of v's 52 significand bits; the nearest rounding midpoint
// is where they read 2^28 (below 2^-126 the dropped bits are more, and
// fp32's binade edges are no midpoints). So a distance of more than
// kMidpointMargin ulps from 2^28 decides: one integer test on the low word
// instead of two more roundings.
template <class L>
__device__ __forceinline__ float decided(double v, bool& sure) {
    constexpr uint32_t kMidpoint = 1u << 28;
    const uint32_t dropped = static_cast<uint32_t>(L::bits64(v)) & (2 * kMidpoint - 1);
    sure = dropped - (kMidpoint - kMidpointMargin) > 2 * kMidpointMargin;  // unsigned: outside kMidpoint +- the margin
    return static_cast<float>(v);
}

// rounded_sigmoid(x), decided for x in (-87, 38) and the tails (x >= 38: e^-x
// < 2^-54, 1 + e rounds to 1, the sigmoid to 1; x <= -88.75: e rounds to an
// fp32 inf, the oracle's 0); sure is false for NaN and (-88.75, -87].
template <class L>
__device__ __forceinline__ float sigmoid(float x, bool& sure) {
    const bool in_range = x > -87.0f && x < 38.0f;  // NaN is not
    const bool one = x >= 38.0f, zero = x <= -88.75f;
    const double e = fast64::exp<L>(in_range ? -static_cast<double>(x) : 0.0);  // (2^-55, 2^126)
    const float s = decided<L>(reciprocal<L>(1.0 + e), sure);
    sure = (sure && in_range) || one || zero;
    return one ? 1.0f : zero ? 0.0f : s;
}

// sqrt_softplus(x), decided; x in [-87, 87] (sure is false elsewhere).
template <class L>
__device__ __forceinline__ float sqrt_softplus(float x, bool& sure) {
    const bool in_range = x >= -87.0f && x <= 87.0f;  // NaN is not
    const double x64 = in_range ? static_cast<double>(x) : 0.0;
    const double u = fast64::exp<L>(-fabs(x64));  // e^-|x| in (0, 1]
    const double w = 2.0 + u;
    const double r = reciprocal<L>(w);
    const double z0 = u * r;
    const double z = fma(r, fma(-z0, w, u), z0);  // u / (2 + u), refined once
    const double soft = (x64 > 0.0 ? x64 : 0.0) + (z + z) * atanh_series(z * z);  // max(x, 0) + log1p(u)
    const float q = decided<L>(sqrt_of_normal<L>(soft), sure);
    sure = sure && in_range;
    return q;
}

}  // namespace fast64

// A model contract's scores of kN values, by value in and out of model_scores.
template <int kN>
struct Scores {
    float v[kN];
};
// kN model-contract scores a call (the header's note above): the kN fast
// forms first, with no call between them, so that their float64 chains
// overlap (a call in between would serialize them: the compiler does not
// move work across one); then libm for the rare values fast64 left.
template <class L, bool kSqrtSoftplus, int kN>
__device__ __noinline__ Scores<kN> model_scores(Scores<kN> x) {
    Scores<kN> r;
    bool sure[kN];
#pragma unroll
    for (int i = 0; i < kN; ++i) {
        r.v[i] = kSqrtSoftplus ? fast64::sqrt_softplus<L>(x.v[i], sure[i]) : fast64::sigmoid<L>(x.v[i], sure[i]);
    }
#pragma unroll
    for (int i = 0; i < kN; ++i) {
        if (!sure[i]) r.v[i] = kSqrtSoftplus ? sqrt_softplus(x.v[i]) : rounded_sigmoid(x.v[i]);
    }
    return r;
}

// Whether contract C's score is a model contract's float64 one (kAlt: a
// kChosen contract's sqrt(softplus(x)) this launch).
template <class C, bool kAlt>
constexpr bool kScoreIsSqrtSoftplus = C::kScore == ScoreFn::kSqrtSoftplus || (C::kScore == ScoreFn::kChosen && kAlt);
template <class C, bool kAlt>
constexpr bool kScoreIsFloat64 = kScoreIsSqrtSoftplus<C, kAlt> || C::kRoundedSigmoid;

// A model contract's float64 scores of kN values (model_scores).
template <class C, class L, bool kAlt, int kN>
__device__ __forceinline__ void float64_scores(const float* x, float* out) {
    static_assert(kScoreIsFloat64<C, kAlt>, "the sigmoid of contracts aiter and serial is fp32 (contract_sigmoid)");
    Scores<kN> in;
#pragma unroll
    for (int i = 0; i < kN; ++i) in.v[i] = x[i];
    const Scores<kN> r = model_scores<L, kScoreIsSqrtSoftplus<C, kAlt>, kN>(in);
#pragma unroll
    for (int i = 0; i < kN; ++i) out[i] = r.v[i];
}

// DeepSeek-V4's ungrouped sqrt(softplus(x)) scores a warp-per-token launch
// in two phases (Slice::two_phase_keys): fp32 approximations for every
// value, float64 only for the values that can reach the k-th largest (on the
// H200, 384/6 at M = 4096: 9.37 against 10.77 us). The float64 sigmoid is
// cheap enough that the phases' bookkeeping costs more than they save
// (kimi-k2 384/8 at M = 4096: 9.01 against 8.27 us), so the sigmoid
// contracts score every value in float64, as do the grouped contracts (they
// rank groups by sums of scores) and a block per token (which spreads the
// float64 chains over four warps).
template <class C, bool kAlt>
constexpr bool kTwoPhase = kScoreIsSqrtSoftplus<C, kAlt> && C::kGroups == 1;

// A model contract's score in fp32 for the first phase, and the bound of its
// relative error for |x| <= 87 that the second phase relies on: the score
// lies within kApproximateBound<...> * approximate_score(x) of the float64
// score rounded to fp32. kernels/radix4/lab/radix4_model_scores_exhaustive.cu
// checks both bounds for every fp32 x in [-87, 87] on the device; a value
// outside that range always takes its float64 score.
//   sigmoid: 1 / (1 + 2^(-x log2(e))) with MUFU ex2 and the quick reciprocal:
//     the product's rounding moves 2^(...) by at most |x| 2^-24 log2(e) ln 2
//     of its size (2^-17.4 at 87), ex2 by 2^-22, the sum and the reciprocal
//     by an ulp each: below 2^-17; bound 2^-14.
//   sqrt(softplus(x)) = sqrt(max(x, 0) + log1p(u)), u = 2^(-|x| log2(e)) as
//     above (within 2^-17); log1p(u) as u (1 - u / 2) below u = 2^-10
//     (truncation u^2 / 3) and as lg2(1 + u) ln 2 above (MUFU lg2's absolute
//     error, at most 2^-21, against log1p(u) >= 2^-10.01): below 2^-10.5;
//     the root halves it: bound 2^-9.
template <bool kSqrtSoftplus>
constexpr float kApproximateBound = kSqrtSoftplus ? 0x1p-9f : 0x1p-14f;
template <class L, bool kSqrtSoftplus>
__device__ __forceinline__ float approximate_score(float x) {
    constexpr float kLog2eF = 0x1.715476p+0f;
    if constexpr (kSqrtSoftplus) {
        const float u = L::exp2_flushed(-fabsf(x) * kLog2eF);
        const float log1p_u = u < 0x1p-10f ? u * (1.0f - 0.5f * u) : L::log2_approx(1.0f + u) * 0x1.62e430p-1f;
        return L::sqrt_approx((x > 0.0f ? x : 0.0f) + log1p_u);
    } else {
        return L::reciprocal(1.0f + L::exp2_flushed(-x * kLog2eF));
    }
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
    // over a token (Pick's caller bounds the token's values below 2^16):
    // out[q] holds bins 4q and 4q+2, out[4+q] bins 4q+1 and 4q+3.
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

// ---- step clocks ----

// For kernels/radix4/lab/radix4_lab.py: a RADIX4_LAB build records the SM clock of
// block 0, thread 0 at each step; other builds compile nothing.
// A RADIX4_LAB_TOKENS build (CUDA only; kernels/radix4/lab/radix4_token_lab.py)
// records the same six clocks for every token of a launch, from the token's
// thread 0, and its SM and the global timer (ns, comparable across SMs) at
// entry and at the end: where a batch's time goes beyond one token's.
#if defined(RADIX4_LAB) && defined(RADIX4_LAB_TOKENS)
#error "RADIX4_LAB and RADIX4_LAB_TOKENS are two different step-clock builds: pick one"
#endif
#ifdef RADIX4_LAB
__device__ unsigned long long radix4_lab_clock[8];
#define RADIX4_STAMP(i)                                                               \
    do {                                                                              \
        if (blockIdx.x == 0 && threadIdx.x == 0) radix4_lab_clock[i] = clock64();     \
    } while (0)
#elif defined(RADIX4_LAB_TOKENS)
constexpr int kLabTokens = 8192;
constexpr int kLabWords = 10;  // clocks 0..5, global timer at 0 and 5, SM id, warp slot
__device__ unsigned long long radix4_lab_token[kLabTokens][kLabWords];
__device__ __forceinline__ unsigned long long lab_global_timer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned lab_sm_id() {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}
__device__ __forceinline__ unsigned lab_warp_slot() {
    unsigned id;
    asm volatile("mov.u32 %0, %%warpid;" : "=r"(id));
    return id;
}
#define RADIX4_STAMP(i)                                                                        \
    do {                                                                                       \
        if (at.tid == 0 && at.token < kLabTokens) {                                            \
            unsigned long long* lab = radix4_lab_token[at.token];                              \
            lab[i] = clock64();                                                                \
            if ((i) == 0) lab[6] = lab_global_timer(), lab[8] = lab_sm_id(), lab[9] = lab_warp_slot(); \
            if ((i) == 5) lab[7] = lab_global_timer();                                         \
        }                                                                                      \
    } while (0)
#else
#define RADIX4_STAMP(i) \
    do {                \
    } while (0)
#endif

// Which way a token's selection went (RankPath), for the host emulation's
// tests, which define RADIX4_NOTE_PATH to count them: each way must be
// exercised by some case. Device builds compile nothing.
enum class RankPath : int { kPacked = 0, kKeys = 1, kComposites = 2, kRegions = 3, kRadix = 4, kPackedPairs = 5 };
#ifndef RADIX4_NOTE_PATH
#define RADIX4_NOTE_PATH(path) \
    do {                       \
    } while (0)
#endif
// How a model contract's warp-per-token token got its float64 scores:
// kTwoPhase, only the values near the cutoff (Slice::two_phase_keys), or
// kEvery, every value (unusual rows, too many values near the cutoff).
enum class ScorePath : int { kTwoPhase = 0, kEvery = 1 };
#ifndef RADIX4_NOTE_SCORES
#define RADIX4_NOTE_SCORES(path) \
    do {                         \
    } while (0)
#endif

// How a token of the approximate keys (kApproximateKeys) was selected:
// kApproximate, the candidates within the margin; kExact, every value's
// exact key (a NaN or huge key, too many candidates).
enum class KeyPath : int { kApproximate = 0, kExact = 1 };
#ifndef RADIX4_NOTE_KEYS
#define RADIX4_NOTE_KEYS(path) \
    do {                       \
    } while (0)
#endif

// ---- the launch's compile-time shape, and the shared memory of all steps ----

// kWarpsPerToken lane groups (warps / waves) route one token together; with
// more than one, a block is one token and histograms are summed across the
// warps through shared memory (one barrier per round). With one,
// kTokensPerBlock warps each route their own token and never synchronize
// beyond the warp. Many warps per token cut a token's latency (small
// batches); one warp per token has the least overhead per token (large
// batches).
//
// kDynamic: the generic path. E and K are then bounds (a padded expert count
// and 16), and a launch routes any experts <= E and topk <= K: the experts
// at and past `experts` are phantoms, like a ragged shape's phantom slots
// (never valid, key 0), and every count of winners is the launch's topk
// (Dims below).
template <class L, int E_, int K_, int kWarpsPerToken, int kTokensPerBlock, bool kDynamic_ = false>
struct Shape {
    static constexpr int E = E_, K = K_;
    static constexpr bool kDynamic = kDynamic_;
    static constexpr int kLanes = L::kLanes;
    static constexpr int kWarps = kWarpsPerToken;
    static constexpr int kTokens = kTokensPerBlock;
    static constexpr int kThreads = kLanes * kWarpsPerToken;  // threads per token
    static constexpr int kBlockThreads = kThreads * kTokensPerBlock;
    static constexpr int kGroups = E / 4;
    static constexpr int kSlots = (kGroups + kThreads - 1) / kThreads;  // vectors of 4 per thread
    static constexpr int kVals = 4 * kSlots;
    static constexpr bool kRagged = kGroups % kThreads != 0;  // last slot empty on some threads
    static constexpr bool kShared = kWarpsPerToken > 1;
    static constexpr int kPrioBits = 12;  // tie priority < 4096, and so is an expert id
    static constexpr uint64_t kIdMask = (uint64_t{1} << kPrioBits) - 1u;
    // The bits an inverted tie priority (0 .. E - 1) needs: the rank step's
    // packed words keep the rest for key - lo.
    static constexpr int kPackBits = E <= 1 ? 1 : 32 - __builtin_clz(static_cast<unsigned>(E - 1));
    static constexpr int kRankMax = RADIX4_RANK_MAX;
    // One warp's share of the candidates, at most, rounded up to the rank
    // step's four entries per step.
    static constexpr int kRankCap = kRankMax > 0 ? (kRankMax + 3) & ~3 : 4;
    // Per-warp histogram sums (8 words), or the bound step's max and bounds
    // (1 + warps).
    static constexpr int kPartialWords = 1 + kWarpsPerToken > 8 ? 1 + kWarpsPerToken : 8;

    static_assert(E % 4 == 0 && E >= 4 && E <= (1 << kPrioBits), "E must be a multiple of 4 in 4..4096");
    static_assert(K >= 1 && K <= E, "1 <= k <= E");
    static_assert(kVals <= 64, "a thread keeps its winners in a 64-bit mask");
    static_assert(!kShared || kTokensPerBlock == 1, "a token spread over warps owns its block");
    static_assert(kWarpsPerToken >= 1 && kWarpsPerToken * kLanes <= 1024 && kBlockThreads <= 1024, "one block");
    static_assert(kRankMax >= 0 && kRankMax <= 1024, "RADIX4_RANK_MAX must be 0..1024");
    static_assert(!kDynamic || (!kShared && !kRagged), "the generic path is a warp per token over whole slots");
};

// The experts and the topk a launch routes: the shape's own, or (kDynamic)
// the launch's. Constant-folded away for a fixed shape.
template <class S>
struct Dims {
    int experts_, topk_;
    __device__ __forceinline__ int experts() const {
        if constexpr (S::kDynamic) {
            return experts_;
        } else {
            return S::E;
        }
    }
    __device__ __forceinline__ int topk() const {
        if constexpr (S::kDynamic) {
            return topk_;
        } else {
            return S::K;
        }
    }
};

// One expert's entry in shared memory: its composite (larger ranks first),
// its weight numerator and its expert id (the composite's low bits for a
// candidate).
struct Entry {
    uint64_t composite;
    float sig;
    int32_t id;
};

// The rank step's candidates, one region per warp (a warp's share of the
// token's C candidates is at most C). Either two arrays (composites 16-byte
// aligned, so that two load as one in the rank loop) or, with
// RADIX4_COPY_ENTRY16, one of 16-byte entries (one store per candidate).
template <class S>
struct Candidates {
#if RADIX4_COPY_ENTRY16
    alignas(16) Entry entry[S::kTokens][S::kWarps][S::kRankCap];
    __device__ __forceinline__ uint64_t composite(int local, int w, uint32_t i) const { return entry[local][w][i].composite; }
    __device__ __forceinline__ float sig(int local, int w, uint32_t i) const { return entry[local][w][i].sig; }
    __device__ __forceinline__ void clear(int local, int w, uint32_t i) { entry[local][w][i].composite = 0u; }
    template <class L>
    __device__ __forceinline__ void store_if(bool take, int local, int w, uint32_t i, uint64_t composite, float sig) {
        L::store_shared_if(take, &entry[local][w][i], composite, sig);
    }
#else
    alignas(16) uint64_t comp[S::kTokens][S::kWarps][S::kRankCap];
    float sigs[S::kTokens][S::kWarps][S::kRankCap];
    __device__ __forceinline__ uint64_t composite(int local, int w, uint32_t i) const { return comp[local][w][i]; }
    __device__ __forceinline__ float sig(int local, int w, uint32_t i) const { return sigs[local][w][i]; }
    __device__ __forceinline__ void clear(int local, int w, uint32_t i) { comp[local][w][i] = 0u; }
    template <class L>
    __device__ __forceinline__ void store_if(bool take, int local, int w, uint32_t i, uint64_t composite, float sig) {
        L::store_shared_if(take, &comp[local][w][i], composite);
        L::store_shared_if(take, &sigs[local][w][i], sig);
    }
#endif
};

// The most expert groups a grouped contract has (GroupStep's exchange).
constexpr int kMaxGroups = 64;

// Every step's shared memory, one struct per block (CUB's TempStorage).
template <class S>
struct Storage {
    Candidates<S> cand;
    Entry winners[S::kTokens][S::K];  // the radix path's winners, in arrival order
    float ranked_sig[S::kTokens][S::K];  // the winners in output order
    int32_t ranked_id[S::kTokens][S::K];
    uint32_t partial[2][S::kWarps][S::kPartialWords];  // double-buffered by round
    uint32_t cand_count[S::kTokens][S::kWarps];
    uint32_t winner_count;
    // The group scores a block per token exchanges (GroupStep; last, so that
    // the members above keep their offsets in every kernel).
    uint32_t group_key[S::kShared ? kMaxGroups : 1];
};

// Where this thread is: its lane, its lane group, its token.
template <class S, class L>
struct Coords {
    int lane, warp;
    int local;   // this token's index in the block
    int region;  // this warp's candidate region
    int tid;     // this thread's index among the token's threads
    int token;
    Dims<S> dims;

    static __device__ __forceinline__ Coords here(Dims<S> dims) {
        Coords c;
        c.dims = dims;
        c.lane = L::lane();
        c.warp = L::group();
        c.local = S::kShared ? 0 : c.warp;
        c.region = S::kShared ? c.warp : 0;
        c.tid = S::kShared ? static_cast<int>(threadIdx.x) : c.lane;
        c.token = static_cast<int>(blockIdx.x) * S::kTokens + c.local;
        return c;
    }
};

// The token's threads meet (a barrier with several warps, else the warp's),
// and sum over them. With several warps each warp's sum goes to shared
// memory, one barrier, every thread adds the warps' parts in the same
// order. Alternating buffers make one barrier per round enough: a warp can
// only overwrite a buffer after every warp has passed the next barrier,
// hence finished reading it.
template <class S, class L>
struct TokenExchange {
    uint32_t (*partial)[S::kWarps][S::kPartialWords];
    int parity;

    __device__ __forceinline__ explicit TokenExchange(Storage<S>& storage) : partial(storage.partial), parity(0) {}

    static __device__ __forceinline__ void sync() {
        if constexpr (S::kShared) {
            __syncthreads();
        } else {
            L::sync();
        }
    }

    __device__ __forceinline__ void sum(uint32_t v[8], const Coords<S, L>& at) {
#pragma unroll
        for (int w = 0; w < 8; ++w) v[w] = L::sum(v[w]);
        if constexpr (S::kShared) {
            if (at.lane == 0) {
#pragma unroll
                for (int w = 0; w < 8; ++w) partial[parity][at.warp][w] = v[w];
            }
            __syncthreads();
#pragma unroll
            for (int w = 0; w < 8; ++w) v[w] = 0;
#pragma unroll
            for (int i = 0; i < S::kWarps; ++i) {
#pragma unroll
                for (int w = 0; w < 8; ++w) v[w] += partial[parity][i][w];
            }
            parity ^= 1;
        }
    }
};

// ---- step 1: load, sigmoid, rank keys (this thread's share of the token) ----

// The float a rank key came from (key 0, NaN's, gives a NaN).
template <class L>
__device__ __forceinline__ float key_value(uint32_t key) {
    return L::as_float((key & 0x80000000u) ? key ^ 0x80000000u : ~key);
}

template <class S, class L>
__device__ __forceinline__ uint32_t lanes_larger(uint32_t v);  // step 2 (the two-phase scores use it too)

template <class S, class C>
struct Slice {
    static constexpr int kVals = S::kVals, kSlots = S::kSlots;
    float sig[kVals];
    uint32_t key[kVals];
    // Per slot, the low word of its first expert's composite: inverted tie
    // priority << 12 | expert id. The slot's expert i has word - i * 4095
    // (the priority falls by i, the id rises by i, neither borrows).
    uint32_t word[kSlots];
    uint32_t lane_max;  // the largest key of this thread's values
    // Two-phase scores (two_phase_keys): a bound lo of the token's keys, found
    // on the way (the bound step need not rank the lane maxima); 0: none.
    uint32_t phased_lo = 0u;
    int tid;
    Dims<S> dims;

    __device__ __forceinline__ int vector(int s) const { return tid + S::kThreads * s; }
    __device__ __forceinline__ bool slot_valid(int s) const { return !S::kRagged || s < kSlots - 1 || vector(s) < S::kGroups; }
    // Value j is one of the token's experts (not a phantom).
    __device__ __forceinline__ bool valid(int j) const {
        if constexpr (S::kDynamic) {
            return 4 * vector(j / 4) + (j & 3) < dims.experts();
        } else {
            return slot_valid(j / 4);
        }
    }
    __device__ __forceinline__ uint32_t low_word(int j) const {
        constexpr uint32_t kStep = (1u << S::kPrioBits) - 1u;
        return word[j / 4] - static_cast<uint32_t>(j & 3) * kStep;
    }
    __device__ __forceinline__ int32_t expert_of(int j) const { return static_cast<int32_t>(low_word(j) & S::kIdMask); }
    // Inverted tie priority: larger wins, like the key.
    __device__ __forceinline__ uint32_t inv_priority(int j) const { return low_word(j) >> S::kPrioBits; }
    // key, inverted priority, expert id: ordered by the first two (priorities
    // are unique); the id rides along so that the rank step stores 8 bytes.
    __device__ __forceinline__ uint64_t composite(int j) const {
        return (static_cast<uint64_t>(key[j]) << 32) | low_word(j);
    }

    // Issue every load before any is used, with no branch between them: a
    // thread without a last vector (kRagged) loads the token's last one
    // again and drops it. (Behind a branch, nvcc began the first vector's
    // sigmoid before issuing the second's loads: two trips to L2, not one.)
    // The tie priorities read a constant table and may precede the wait for
    // earlier grids; the logits and the bias follow it.
    template <class L, class Score, class Bias, int kVec>
    __device__ __forceinline__ void load(const typename Score::Raw* row, const typename Bias::Raw* bias, float x[kVals],
                                         float b[kVals], bool vec = true) {
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            const uint32_t inverted = static_cast<uint32_t>(S::E - 1) - C::template vector_priority<S::E>(clamped(s));
            word[s] = (inverted << S::kPrioBits) | static_cast<uint32_t>(4 * clamped(s));
        }
        L::wait_for_prior_grids();
        if constexpr (kVec == 2) {
            if (vec) {
                load_values<Score, Bias, 1, L>(row, bias, x, b);
            } else {
                load_values<Score, Bias, 0, L>(row, bias, x, b);
            }
        } else {
            load_values<Score, Bias, kVec, L>(row, bias, x, b);
        }
    }
    template <class Score, class Bias, int kVec, class L>
    __device__ __forceinline__ void load_values(const typename Score::Raw* row, const typename Bias::Raw* bias,
                                                float x[kVals], float b[kVals]) const {
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            if constexpr (S::kDynamic) {
                load_dynamic<Score, L, kVec>(row, s, x + 4 * s);
                load_dynamic<Bias, L, kVec>(bias, s, b + 4 * s);
            } else {
                load4<Score, L, kVec>(row + 4 * clamped(s), x + 4 * s);
                load4<Bias, L, kVec>(bias + 4 * clamped(s), b + 4 * s);
            }
        }
    }
    // The generic path's slot s, its phantoms reading the token's last expert
    // again (their values are dropped): by vectors when experts % 4 == 0 and
    // the row and the bias are aligned (kVec 1; the caller checks), else
    // element by element.
    template <class T, class L, int kVec>
    __device__ __forceinline__ void load_dynamic(const typename T::Raw* p, int s, float out[4]) const {
        const int last = dims.experts() - 1;
        if constexpr (kVec) {
            const int v = vector(s) < last / 4 ? vector(s) : last / 4;
            load4<T, L, 1>(p + 4 * v, out);
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int e = 4 * vector(s) + i;
                out[i] = T::template widen<L>(p[e < last ? e : last]);
            }
        }
    }

    // sig and key of every value, and this thread's largest key (lane_max);
    // phantom slots (kRagged) get sig 0, key 0 and count for no maximum.
    //
    // The quick way first, for every value: the reciprocal without its
    // range test, the key without the contract's mapping of NaN and of
    // values that never win (C::rank_key). Both are exact unless a value is
    // out of the common range, which three reductions over the thread's
    // values find (a test per value would cost 3 instructions of 20): a
    // sigmoid below 2^-124 (its denominator may be past L::kReciprocalLimit,
    // where the quick reciprocal flushes), or a key outside
    // [C::lowest_key, ordered_bits(+inf)] (NaN, or a value the contract maps
    // to 0). Then, in one branch the token's lanes take together, the exact
    // way for every value, reading the logits and the bias again. (A model
    // contract's float64 score has one form, four values a call.)
    template <class L, class Score, class Bias, int kVec, bool kAlt = false, bool kApproximate = false>
    __device__ __forceinline__ void compute_keys(const typename Score::Raw* row, const typename Bias::Raw* bias,
                                                 const float x[kVals], const float b[kVals], bool vec = true) {
        if constexpr (kApproximate) {
            // key[j] holds approximate_key's float, phantoms -inf (below
            // every threshold); lane_max its ordered bits, NaN's above every
            // number's (the kernel then takes the exact way), 0 on a lane
            // of phantoms only (no key reaches it). No sig: Rescore.
            float m = -__builtin_huge_valf();
            bool any_here = false;
#pragma unroll
            for (int j = 0; j < kVals; ++j) {
                const bool here = valid(j);
                const float a = here ? approximate_key<L>(x[j], b[j]) : -__builtin_huge_valf();
                key[j] = L::as_uint(a);
                m = L::max_nan(m, a);
                any_here |= here;
            }
            lane_max = any_here ? ordered_bits<L>(m) : 0u;
            return;
        }
        uint32_t sig_min = ~0u, key_min = ~0u, key_max = 0u;
        constexpr bool kPhased = kTwoPhase<C, kAlt> && S::kWarps == 1;
        if constexpr (kScoreIsFloat64<C, kAlt> && !kPhased) {  // four values (a slot) a call: eight were slower on the H200
#pragma unroll
            for (int s = 0; s < kSlots; ++s) float64_scores<C, L, kAlt, 4>(x + 4 * s, sig + 4 * s);
        }
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            const bool slot_here = slot_valid(s);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int j = 4 * s + i;
                const bool here = S::kDynamic ? valid(j) : slot_here;
                if constexpr (kPhased) {
                    sig[j] = here ? approximate_score<L, kScoreIsSqrtSoftplus<C, kAlt>>(x[j]) : 0.0f;
                } else if constexpr (kScoreIsFloat64<C, kAlt>) {
                    sig[j] = here ? sig[j] : 0.0f;  // float64_scores above, phantom slots too
                } else {
                    sig[j] = here ? L::reciprocal(C::template denominator<L>(x[j])) : 0.0f;
                }
                key[j] = here ? ordered_bits<L>(sig[j] + b[j]) : 0u;
                if (here) {
                    const uint32_t sig_bits = L::as_uint(sig[j]);  // sig >= +0 or NaN: ordered as its bits
                    sig_min = sig_bits < sig_min ? sig_bits : sig_min;
                    key_min = key[j] < key_min ? key[j] : key_min;
                    key_max = key[j] > key_max ? key[j] : key_max;
                }
            }
        }
        const uint32_t kSmallestQuickSig = L::as_uint(0x1p-124f);
        const uint32_t kInfKey = ordered_bits<L>(__builtin_huge_valf());
        const bool unusual = sig_min < kSmallestQuickSig || key_min < C::template lowest_key<L>() || key_max > kInfKey;
        lane_max = key_max;
        bool exact_all = L::any(unusual);
        if constexpr (kPhased) {
            if (__builtin_expect(!exact_all, 1)) exact_all = !two_phase_keys<L, kAlt>(x, b, key_min);
            RADIX4_NOTE_SCORES(exact_all ? ScorePath::kEvery : ScorePath::kTwoPhase);
        }
        if (__builtin_expect(exact_all, 0)) exact_keys_for<L, Score, Bias, kVec, kAlt>(row, bias, vec);
    }

    // exact_keys with compute_keys's choice of vector loads.
    template <class L, class Score, class Bias, int kVec, bool kAlt = false>
    __device__ __forceinline__ void exact_keys_for(const typename Score::Raw* row, const typename Bias::Raw* bias,
                                                   bool vec) {
        if constexpr (kVec == 2) {
            if (vec) {
                exact_keys<L, Score, Bias, 1, kAlt>(row, bias);
            } else {
                exact_keys<L, Score, Bias, 0, kAlt>(row, bias);
            }
        } else {
            exact_keys<L, Score, Bias, kVec, kAlt>(row, bias);
        }
    }

    // The second phase of the two-phase scores (kTwoPhase, a warp per token).
    // compute_keys gave every value its approximate_score a'_j and key; the
    // float64 score is needed only where it can change the result: at the
    // winners (their weights and order) and wherever a value could reach the
    // k-th largest ranking value T. One bound e serves the warp: with r' the
    // approximate ranking value and r the exact one, |r'_j - r_j| is within
    // the score's bound times a'_j plus both sums' roundings (2^-22 of
    // |r'_j| + a'_j), and e, the warp's largest score bound plus 2^-18 of
    // its largest |r'| + a', covers that with room for the roundings below
    // (each within 2^-24 of sizes e is 2^-18 of):
    //   lb = (the k-th largest of the lanes' largest r') - 2e: k values (one
    //        a lane) have r >= lb, so lb <= T;
    //   every value with r'_j >= lb - 2e (a compare of keys) gets its float64
    //        score and key (gathered over the warp in shared memory, at most
    //        four a lane, one call: their chains overlap). That is every
    //        value with r_j >= lb, so every winner and every value equal to T;
    //   every other value keeps its approximate key, below lb - 2e, and its
    //        exact one is below lb: it neither wins nor ties the cutoff.
    // So the selection over these keys is the all-float64 one, and so are the
    // winners' weights. And lb is a bound for it: the k values above reach lb
    // with their exact keys. So phased_lo = key(lb) serves as the bound
    // step's lo (the kernel skips that step's lane ranking). False (the
    // caller scores every value in float64) when a value lies outside
    // [-87, 87], where approximate_score's bound is not claimed, or more than
    // four values a lane need it (ties, levels).
    template <class L, bool kAlt>
    __device__ __forceinline__ bool two_phase_keys(const float x[kVals], const float b[kVals], uint32_t key_min) {
        static_assert(S::kWarps == 1, "two phases in a warp-per-token launch only");
        constexpr int kList = 4 * L::kLanes;
        constexpr float kBound = kApproximateBound<kScoreIsSqrtSoftplus<C, kAlt>>;
        __shared__ float list[S::kTokens][kList];  // this token's values to score, then their scores
        float sig_max = 0.0f;  // phantoms hold 0
        bool outside = false;
#pragma unroll
        for (int j = 0; j < kVals; ++j) {
            sig_max = fmaxf(sig_max, sig[j]);
            if (valid(j)) outside |= !(fabsf(x[j]) <= 87.0f);
        }
        if (L::any(outside)) return false;
        // fmaxf passes over the NaN of key 0 (a lane of phantoms only).
        const float r_abs = fmaxf(fabsf(key_value<L>(key_min)), fabsf(key_value<L>(lane_max)));
        const float e_lane = kBound * sig_max + 0x1p-18f * (fmaxf(r_abs, 0.0f) + sig_max) + 0x1p-100f;
        const float e = L::as_float(L::all_max(L::as_uint(e_lane)));  // e >= 0: its bits are ordered
        // The k-th largest lane maximum; a lane of phantoms holds 0 (then fewer than k lanes hold values: rare
        // small generic shapes, scored the plain way).
        const uint32_t larger = lanes_larger<S, L>(lane_max);
        const uint32_t kth = L::all_min(larger < static_cast<uint32_t>(dims.topk()) ? lane_max : ~0u);
        if (kth == 0u) return false;
        const uint32_t lb_key = ordered_bits<L>(key_value<L>(kth) - 2.0f * e);
        const uint32_t threshold = ordered_bits<L>(key_value<L>(lb_key) - 2.0f * e);
        uint32_t maybe = 0u;  // bit j: value j needs its float64 score
#pragma unroll
        for (int j = 0; j < kVals; ++j) {
            if (valid(j) && key[j] >= threshold) maybe |= 1u << j;
        }
        const uint32_t count = static_cast<uint32_t>(__popcll(maybe));
        const uint32_t total = L::sum(count);
        if (total > static_cast<uint32_t>(kList)) return false;
        float* mine = list[L::group()];
        uint32_t at = L::exclusive_scan(count);
#pragma unroll
        for (int j = 0; j < kVals; ++j) {
            if ((maybe >> j) & 1u) mine[at++] = x[j];
        }
        L::sync();
        const int lane = L::lane();
        float in[4], out[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) in[t] = lane + t * L::kLanes < static_cast<int>(total) ? mine[lane + t * L::kLanes] : 0.0f;
        if (total <= static_cast<uint32_t>(L::kLanes)) {
            float64_scores<C, L, kAlt, 1>(in, out);
        } else if (total <= static_cast<uint32_t>(2 * L::kLanes)) {
            float64_scores<C, L, kAlt, 2>(in, out);
        } else {
            float64_scores<C, L, kAlt, 4>(in, out);
        }
        L::sync();  // every lane has read its inputs
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            if (lane + t * L::kLanes < static_cast<int>(total)) mine[lane + t * L::kLanes] = out[t];
        }
        L::sync();
        at -= count;
        lane_max = 0u;
#pragma unroll
        for (int j = 0; j < kVals; ++j) {
            if ((maybe >> j) & 1u) {
                sig[j] = mine[at++];
                key[j] = ordered_bits<L>(sig[j] + b[j]);
            }
            if (valid(j)) lane_max = key[j] > lane_max ? key[j] : lane_max;
        }
        phased_lo = lb_key;
        return true;
    }

    // The contract's sigmoid and rank key for every value, and lane_max
    // again: for rows with NaN, values the contract never takes (the serial
    // floor, -inf masks) or sigmoids that underflow. (Inlined: out of line,
    // the slice's registers would have to live in memory.)
    template <class L, class Score, class Bias, int kVec, bool kAlt>
    __device__ __forceinline__ void exact_keys(const typename Score::Raw* row, const typename Bias::Raw* bias) {
        lane_max = 0u;
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            if (slot_valid(s)) {
                float again[4], b[4];  // loaded again rather than kept live in registers
                if constexpr (S::kDynamic) {
                    load_dynamic<Score, L, kVec>(row, s, again);
                    load_dynamic<Bias, L, kVec>(bias, s, b);
                } else {
                    load4<Score, L, kVec>(row + 4 * vector(s), again);
                    load4<Bias, L, kVec>(bias + 4 * vector(s), b);
                }
                if constexpr (kScoreIsFloat64<C, kAlt>) float64_scores<C, L, kAlt, 4>(again, sig + 4 * s);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    if constexpr (!kScoreIsFloat64<C, kAlt>) sig[4 * s + i] = contract_sigmoid<C, L>(again[i]);
                    if constexpr (S::kDynamic) {
                        // A phantom keeps sig 0 and key 0, and no maximum.
                        const bool here = valid(4 * s + i);
                        sig[4 * s + i] = here ? sig[4 * s + i] : 0.0f;
                        key[4 * s + i] = here ? C::template rank_key<L>(sig[4 * s + i] + b[i]) : 0u;
                    } else {
                        key[4 * s + i] = C::template rank_key<L>(sig[4 * s + i] + b[i]);
                    }
                    lane_max = key[4 * s + i] > lane_max ? key[4 * s + i] : lane_max;
                }
            } else {
#pragma unroll
                for (int i = 0; i < 4; ++i) key[4 * s + i] = 0u;  // a phantom slot (approximate keys held -inf there)
            }
        }
    }

   private:
    // The vector slot s loads: its own, or the token's last for a phantom slot.
    __device__ __forceinline__ int clamped(int s) const {
        return !S::kRagged || s < kSlots - 1 || vector(s) < S::kGroups ? vector(s) : S::kGroups - 1;
    }
};

// ---- step 1b: expert groups (contracts with C::kGroups > 1) ----

// The group scores, the kept groups and the mask, in the registers of the
// load step: a group's vectors sit on kVecPerGroup consecutive lanes of one
// slot (vector g on thread g % threads, slot g / threads), so the lanes of a
// group merge their two largest keys by xor shuffles, every lane gathers the
// n_group group keys (one shuffle each; with a block per token, through
// shared memory and one barrier) and ranks its own groups against them:
// kept iff fewer than topk_group groups score more, or as much with a
// lower index. The keys of a dropped group's experts become the mask's key
// (its sig, the weight, stays). Group scores are sums of fp32 ranking
// values, as the oracle's (+0.0 added: -0 and +0 rank as one), NaN lowest.
template <class S, class L>
struct GroupStep {
    template <class C>
    static __device__ __forceinline__ void run(Slice<S, C>& slice, Storage<S>& storage) {
        constexpr int G = C::kGroups;
        constexpr int kVecPerGroup = S::kGroups / G;
        constexpr int kGroupsPerSlot = S::kThreads / kVecPerGroup;
        static_assert(S::kGroups % G == 0, "n_group must divide E / 4: a group is whole vectors of 4");
        static_assert(!S::kRagged, "groups are routed with every slot full");
        static_assert(G <= kMaxGroups, "at most kMaxGroups groups");
        static_assert(kVecPerGroup >= 1 && S::kLanes % kVecPerGroup == 0, "a group's vectors sit on lanes of one warp");
        static_assert(kGroupsPerSlot * S::kSlots == G, "each slot holds whole groups");
        constexpr uint32_t kMaskKey = C::kMaskZero ? 0x80000000u : 0x007fffffu;  // ordered_bits(0.0) or (-inf)
        uint32_t group_key[S::kSlots];
#pragma unroll
        for (int s = 0; s < S::kSlots; ++s) {
            auto merge = [](uint32_t& a1, uint32_t& a2, uint32_t b1, uint32_t b2) {
                const uint32_t lo1 = a1 < b1 ? a1 : b1, hi2 = a2 > b2 ? a2 : b2;
                a1 = a1 > b1 ? a1 : b1;
                a2 = lo1 > hi2 ? lo1 : hi2;
            };
            const uint32_t* k = slice.key + 4 * s;
            uint32_t k1 = k[0] > k[1] ? k[0] : k[1], k2 = k[0] > k[1] ? k[1] : k[0];
            merge(k1, k2, k[2] > k[3] ? k[2] : k[3], k[2] > k[3] ? k[3] : k[2]);
#pragma unroll
            for (int d = 1; d < kVecPerGroup; d <<= 1) merge(k1, k2, L::shfl_xor(k1, d), L::shfl_xor(k2, d));
            const float score = key_value<L>(k1) + key_value<L>(k2) + 0.0f;
            group_key[s] = score != score ? 0u : ordered_bits<L>(score);
        }
        if constexpr (C::kTopkGroups < G) {
            uint32_t all[G];
            if constexpr (S::kShared) {
                // A block per token: a group's first thread publishes its score.
#pragma unroll
                for (int s = 0; s < S::kSlots; ++s) {
                    if (slice.tid % kVecPerGroup == 0) storage.group_key[slice.tid / kVecPerGroup + kGroupsPerSlot * s] = group_key[s];
                }
                __syncthreads();
#pragma unroll
                for (int h = 0; h < G; ++h) all[h] = storage.group_key[h];
            } else {
#pragma unroll
                for (int h = 0; h < G; ++h) all[h] = L::shfl(group_key[h / kGroupsPerSlot], (h % kGroupsPerSlot) * kVecPerGroup);
            }
            uint32_t lane_max = 0u;
#pragma unroll
            for (int s = 0; s < S::kSlots; ++s) {
                const int mine = slice.tid / kVecPerGroup + kGroupsPerSlot * s;
                uint32_t better = 0;
#pragma unroll
                for (int h = 0; h < G; ++h) better += static_cast<uint32_t>(all[h] > group_key[s] || (all[h] == group_key[s] && h < mine));
                const bool kept = better < static_cast<uint32_t>(C::kTopkGroups);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    uint32_t& key = slice.key[4 * s + i];
                    key = kept ? key : kMaskKey;
                    lane_max = key > lane_max ? key : lane_max;
                }
            }
            slice.lane_max = lane_max;
        }
    }
};

// ---- step 2: the max of the keys, and the bound lo from the lane maxima ----

// How many other lanes of the group hold a larger v: every lane against
// every other (by xor partner), counted as the lanes not larger, which
// L::add_if_at_least adds without a select per lane, in two chains of adds
// rather than one. The bound step ranks lane maxima with it, the rank step
// candidates.
template <class S, class L>
__device__ __forceinline__ uint32_t lanes_larger(uint32_t v) {
    uint32_t not_larger[2] = {0, 0};
#pragma unroll
    for (int d = 1; d < S::kLanes; ++d) L::add_if_at_least(not_larger[d & 1], v, L::shfl_xor(v, d));
    return static_cast<uint32_t>(S::kLanes - 1) - (not_larger[0] + not_larger[1]);
}

struct Bound {
    uint32_t kmax;
    uint32_t lo;  // at least k keys are >= lo
};

// The approximate selection's thresholds (approximate_key's comment), from
// the bound step on the approximate keys; uniform over the token's lanes.
struct ApproximateBound {
    bool exact;   // the token takes the exact way (a NaN key, a key past 2^90)
    float lo;     // the copy takes every approximate key >= lo - 2E
    Bound ranks;  // every candidate's exact key lies in [ranks.lo, ranks.kmax] (the rank step's packed words)

    template <class L>
    static __device__ __forceinline__ ApproximateBound of(Bound approximate) {
        ApproximateBound r;
        r.exact = approximate.kmax > ordered_bits<L>(kApproximateKeyLimit) ||
                  approximate.lo < ordered_bits<L>(-kApproximateKeyLimit);
        const float lo = key_value<L>(approximate.lo), kmax = key_value<L>(approximate.kmax);
        const float e = 2.0f * kApproximateKeyBound + 0x1p-20f * (fmaxf(fabsf(lo), fabsf(kmax)) + 2.0f);
        r.lo = lo - 2.0f * e;
        // A candidate's rho lies in [r.lo - E, kmax + E], its exact key r =
        // (rho + 1) / 2; 2E leaves room for the roundings.
        r.ranks.lo = ordered_bits<L>((r.lo - 2.0f * e + 1.0f) * 0.5f);
        r.ranks.kmax = ordered_bits<L>((kmax + 2.0f * e + 1.0f) * 0.5f);
        return r;
    }
};

template <class S, class L>
struct BoundStep {
    static_assert(S::K <= S::kLanes, "bound 1 is the k-th largest of a group's lane maxima");

    template <class C>
    static __device__ __forceinline__ Bound run(const Slice<S, C>& slice, const Coords<S, L>& at,
                                                TokenExchange<S, L>& exchange) {
        const uint32_t lane_max = slice.lane_max;
        Bound bound{L::all_max(lane_max), 0u};
        // How many lanes of this group hold a larger maximum (every other
        // lane, by xor partner). The lanes with fewer than n larger hold the
        // group's n largest maxima, so the least of them, v_n, is the n-th
        // largest, and at least n keys of the group reach it.
#if RADIX4_SORTED_BOUND
        // Or sort the lane maxima, descending, by a bitonic network (lane i
        // then holds the (i+1)-th largest).
        uint32_t sorted = lane_max;
#pragma unroll
        for (int k = 2; k <= S::kLanes; k <<= 1) {
#pragma unroll
            for (int j = k >> 1; j > 0; j >>= 1) {
                const uint32_t other = L::shfl_xor(sorted, j);
                const bool keep_max = ((at.lane & j) == 0) == ((at.lane & k) == 0);
                sorted = keep_max ? (other > sorted ? other : sorted) : (other < sorted ? other : sorted);
            }
        }
        auto nth_lane_max = [&](uint32_t n) { return L::shfl(sorted, static_cast<int>(n) - 1); };
#else
        const uint32_t larger = lanes_larger<S, L>(lane_max);
        auto nth_lane_max = [&](uint32_t n) { return L::all_min(larger < n ? lane_max : ~0u); };
#endif
        if constexpr (!S::kShared) {
            bound.lo = nth_lane_max(static_cast<uint32_t>(at.dims.topk()));
        } else {
            // Bound m (m = 1..groups): every group has ceil(k / m) keys at or
            // above its v_ceil(k/m), so any m groups together have k; the
            // m-th largest of those values over the groups is a bound. lo =
            // the largest bound.
            uint32_t* mine = exchange.partial[exchange.parity][at.warp];
            if (at.lane == 0) mine[0] = bound.kmax;
#pragma unroll
            for (int m = 1; m <= S::kWarps; ++m) {
                const uint32_t v = nth_lane_max(static_cast<uint32_t>((S::K + m - 1) / m));
                if (at.lane == 0) mine[m] = v;
            }
            __syncthreads();
            const auto& all = exchange.partial[exchange.parity];
#pragma unroll
            for (int i = 0; i < S::kWarps; ++i) {
                bound.kmax = all[i][0] > bound.kmax ? all[i][0] : bound.kmax;
            }
#pragma unroll
            for (int m = 1; m <= S::kWarps; ++m) {
                uint32_t v[S::kWarps];  // sorted descending by an unrolled exchange sort
#pragma unroll
                for (int i = 0; i < S::kWarps; ++i) v[i] = all[i][m];
#pragma unroll
                for (int i = 0; i < S::kWarps; ++i) {
#pragma unroll
                    for (int t = S::kWarps - 1; t > i; --t) {
                        const uint32_t hi = v[t] > v[t - 1] ? v[t] : v[t - 1], low = v[t] > v[t - 1] ? v[t - 1] : v[t];
                        v[t - 1] = hi, v[t] = low;
                    }
                }
                bound.lo = v[m - 1] > bound.lo ? v[m - 1] : bound.lo;
            }
            exchange.parity ^= 1;
        }
        return bound;
    }
};

// ---- placing a winner at its output position ----

// The winner of output position `rank`; under a contract that fills with
// expert 0 (serial), a key-0 winner (nothing above the floor was left)
// leaves as expert 0 with expert 0's sig, `sig0`.
template <class S, class C>
__device__ __forceinline__ void place_winner(Storage<S>& storage, int local, uint32_t rank, uint64_t composite,
                                             float sig, float sig0) {
    int32_t id = static_cast<int32_t>(composite & S::kIdMask);
    if constexpr (C::kFillWithExpertZero) {
        const bool filler = (composite >> 32) == 0u;
        id = filler ? 0 : id;
        sig = filler ? sig0 : sig;
    }
    storage.ranked_sig[local][rank] = sig;
    storage.ranked_id[local][rank] = id;
}

// Expert 0's sig, on every lane of the token's first group (thread 0 of the
// token holds it in its first slot); only a filling contract needs it.
// With approximate keys (Rescore), expert 0's logit is read again.
template <class S, class L, class C, class R>
__device__ __forceinline__ float expert_zero_sig(const Slice<S, C>& slice, const R& rescore) {
    if constexpr (!C::kFillWithExpertZero) {
        return 0.0f;
    } else if constexpr (R::kRescores) {
        return rescore.sig(0);
    } else {
        return L::as_float(L::shfl(L::as_uint(slice.sig[0]), 0));
    }
}

// ---- step 3a: copy the keys >= lo to shared memory ----

// The narrowest unsigned word with a bit for each of a thread's values.
template <bool kWide>
struct BitWord {
    using type = uint32_t;
};
template <>
struct BitWord<true> {
    using type = uint64_t;
};

struct CandidateCount {
    uint32_t count;    // C, the token's candidates
    uint32_t longest;  // the largest region
};

template <class S, class L>
struct CopyStep {
    static constexpr int kCountBits = S::kVals < 8 ? 3 : S::kVals < 16 ? 4 : S::kVals < 32 ? 5 : S::kVals < 64 ? 6 : 7;
    static_assert((1 << kCountBits) > S::kVals, "a lane's count fits kCountBits ballots");

    // Entries past a region's count must hold 0 (the rank loop reads whole
    // steps of four), which is smaller than every composite.
    static __device__ __forceinline__ void clear(Storage<S>& storage, const Coords<S, L>& at) {
#pragma unroll
        for (int i = at.lane; i < S::kRankCap; i += S::kLanes) storage.cand.clear(at.local, at.region, static_cast<uint32_t>(i));
        if constexpr (!S::kShared) L::sync();  // before other lanes write candidates here
    }

    // This lane's share, and where it starts in the group's region (a prefix
    // sum over lanes from one ballot per bit of `mine`); the copy only if
    // the group's count fits a region, as predicated stores.
    // kApproximate: a launch of approximate keys (its candidates' sig is the rank step's to score).
    template <bool kApproximate, class C>
    static __device__ __forceinline__ CandidateCount run(const Slice<S, C>& slice, uint32_t lo, Storage<S>& storage,
                                                         const Coords<S, L>& at) {
#if RADIX4_COPY_CURSOR
        // A phantom slot (kRagged) holds key 0, which must not pass even when
        // lo is 0 (every key 0): it is compared against ~0, which no key reaches.
        auto bound_of = [&](int j) { return slice.valid(j) ? lo : ~0u; };
        uint32_t part[4] = {0, 0, 0, 0};  // four chains of adds, not one
#pragma unroll
        for (int j = 0; j < S::kVals; ++j) L::add_if_at_least(part[j & 3], slice.key[j], bound_of(j));
        const uint32_t mine = (part[0] + part[1]) + (part[2] + part[3]);
#elif RADIX4_COPY_MASK
        using Bits = typename BitWord<(S::kVals > 32)>::type;
        Bits takes = 0;  // bit j: value j is a candidate
#pragma unroll
        for (int j = 0; j < S::kVals; ++j) takes |= static_cast<Bits>(slice.valid(j) && slice.key[j] >= lo) << j;
        const uint32_t mine = static_cast<uint32_t>(__popcll(static_cast<uint64_t>(takes)));
        auto taken = [&](int j) { return ((takes >> j) & 1u) != 0; };
#else
        uint32_t mine = 0;
#pragma unroll
        for (int j = 0; j < S::kVals; ++j) mine += static_cast<uint32_t>(slice.valid(j) && slice.key[j] >= lo);
        auto taken = [&](int j) { return slice.valid(j) && slice.key[j] >= lo; };
#endif
        uint32_t first, n;
        prefix(mine, first, n);
        if (__builtin_expect(n <= static_cast<uint32_t>(S::kRankCap), 1)) {
#if RADIX4_COPY_CURSOR
            // The compare again (7 predicate registers cannot hold 28), a
            // predicated store and a predicated step of a cursor per value.
            // RADIX4_COPY_CURSORS cursors, each starting where the values of
            // the ones before it end (the rank step does not care where in
            // the region a candidate sits): a store reads its address
            // register late, and the step of the same cursor right after it
            // waits for that read; with several, the other cursors' stores
            // fill the wait.
            decltype(L::cursor(&storage.cand.entry[0][0][0])) cursor[kCursors];
            cursors(cursor, first, part, storage, at);
#pragma unroll
            for (int j = 0; j < S::kVals; ++j) {
                // With approximate keys sig is not kept (Rescore scores each candidate again).
                const float sig = kApproximate ? 0.0f : slice.sig[j];
                L::store_if_at_least(slice.key[j], bound_of(j), cursor[j % kCursors], slice.composite(j), sig);
            }
#else
#pragma unroll
            for (int j = 0; j < S::kVals; ++j) {
                const bool take = taken(j);
                storage.cand.template store_if<L>(take, at.local, at.region, first, slice.composite(j), slice.sig[j]);
                first += static_cast<uint32_t>(take);
            }
#endif
        }
        return counted(n, storage, at);
    }

#if RADIX4_COPY_CURSOR
    // The copy of the approximate keys (kApproximateKeys): every value whose
    // float key is >= lo (phantoms hold -inf), by one compare, a predicated
    // store of its low word and a predicated step of its cursor.
    template <class C>
    static __device__ __forceinline__ CandidateCount run_approximate(const Slice<S, C>& slice, float lo,
                                                                     Storage<S>& storage, const Coords<S, L>& at) {
        uint32_t part[4] = {0, 0, 0, 0};  // four chains of adds, not one
#pragma unroll
        for (int j = 0; j < S::kVals; ++j) L::add_if_at_least(part[j & 3], L::as_float(slice.key[j]), lo);
        const uint32_t mine = (part[0] + part[1]) + (part[2] + part[3]);
        uint32_t first, n;
        prefix(mine, first, n);
        if (__builtin_expect(n <= static_cast<uint32_t>(S::kRankCap), 1)) {
            decltype(L::cursor(&storage.cand.entry[0][0][0])) cursor[kCursors];
            cursors(cursor, first, part, storage, at);
#pragma unroll
            for (int j = 0; j < S::kVals; ++j) {
                L::store_if_at_least(L::as_float(slice.key[j]), lo, cursor[j % kCursors], slice.low_word(j));
            }
        }
        return counted(n, storage, at);
    }
#endif

   private:
#if RADIX4_COPY_CURSOR
    static constexpr int kCursors = RADIX4_COPY_CURSORS;
    // The copy's cursors into the group's region, from this lane's first
    // entry and its four chains' counts: cursor c takes the values j with
    // j % kCursors == c and starts where the cursors before it end.
    template <class Cursor>
    static __device__ __forceinline__ void cursors(Cursor (&cursor)[kCursors], uint32_t first, const uint32_t part[4],
                                                   Storage<S>& storage, const Coords<S, L>& at) {
        uint32_t start = first;
#pragma unroll
        for (int c = 0; c < kCursors; ++c) {
            cursor[c] = L::cursor(&storage.cand.entry[at.local][at.region][start]);
#pragma unroll
            for (int e = c; e < 4; e += kCursors) start += part[e];
        }
    }
#endif

    // Where this lane's `mine` candidates start in its group's region, and
    // the group's count n: a prefix sum over lanes from one ballot per bit.
    static __device__ __forceinline__ void prefix(uint32_t mine, uint32_t& first, uint32_t& n) {
        first = 0, n = 0;
        const auto below = L::lanes_below();
#pragma unroll
        for (int bit = 0; bit < kCountBits; ++bit) {
            const auto m = L::ballot((mine >> bit) & 1u);
            first += static_cast<uint32_t>(__popcll(static_cast<uint64_t>(m & below))) << bit;
            n += static_cast<uint32_t>(__popcll(static_cast<uint64_t>(m))) << bit;
        }
    }

    // The token's count after the copy. One warp: n (from ballots) is
    // already every lane's, and only the entries need the barrier; several
    // meet through shared memory.
    static __device__ __forceinline__ CandidateCount counted(uint32_t n, Storage<S>& storage, const Coords<S, L>& at) {
        if (S::kShared && at.lane == 0) storage.cand_count[at.local][at.region] = n;
        TokenExchange<S, L>::sync();
        RADIX4_STAMP(3);
        if constexpr (!S::kShared) return CandidateCount{n, n};
        CandidateCount c{0, 0};
#pragma unroll
        for (int w = 0; w < S::kWarps; ++w) {
            const uint32_t cw = storage.cand_count[at.local][w];
            c.longest = cw > c.longest ? cw : c.longest;
            c.count += cw;
        }
        return c;
    }
};

// ---- step 3b: rank each candidate by counting the larger ones ----

// One group ranks every candidate and places the ranks below k (already the
// output order); the caller's other groups are done.
template <class S, class L>
struct RankStep {
    static_assert(S::kRankCap % 4 == 0, "the rank loop reads four entries of a region per step");
    static_assert(S::kRankMax <= 2 * S::kLanes * 16, "at most 16 passes of two candidates per lane");

    struct Found {
        uint64_t composite;
        float sig;
    };

    // Every candidate's key lies in [lo, kmax]. When that span leaves
    // kPackBits bits free, (key - lo) << kPackBits | inverted priority orders
    // the candidates as their composites do, and no two share a word
    // (priorities are unique): ranks by these words are exact in one pass.
    // The test is the token's (lo and kmax are every lane's), so its lanes
    // branch together.
    static __device__ __forceinline__ bool packs(Bound bound) {
        return bound.kmax - bound.lo < (1u << (32 - S::kPackBits));
    }
    static __device__ __forceinline__ uint32_t packed_word(uint64_t composite, uint32_t lo) {
        const uint32_t key_above_lo = static_cast<uint32_t>(composite >> 32) - lo;
        return (key_above_lo << S::kPackBits) | (static_cast<uint32_t>(composite) >> S::kPrioBits);
    }

    // Candidate i of the token is entry i of region r (regions in order, entries in order).
    static __device__ __forceinline__ int region_of(const Storage<S>& storage, int local, uint32_t& i) {
        uint32_t r = 0;
#pragma unroll
        for (int w = 0; w + 1 < S::kWarps; ++w) {
            const uint32_t cw = storage.cand_count[local][w];
            const bool past = r == static_cast<uint32_t>(w) && i >= cw;
            i -= past ? cw : 0u;
            r += static_cast<uint32_t>(past);
        }
        return static_cast<int>(r);
    }
    static __device__ __forceinline__ Found candidate(const Storage<S>& storage, int local, uint32_t i) {
        const int r = region_of(storage, local, i);
        return Found{storage.cand.composite(local, r, i), storage.cand.sig(local, r, i)};
    }
    // Candidate i, scored exactly from its low word (approximate keys), or as stored.
    template <class R>
    static __device__ __forceinline__ Found candidate(const Storage<S>& storage, int local, uint32_t i, const R& rescore) {
        const Found stored = candidate(storage, local, i);
        if constexpr (R::kRescores) {
            const Scored exact = rescore(static_cast<uint32_t>(stored.composite));
            return Found{exact.composite, exact.sig};
        } else {
            return stored;
        }
    }

    template <class C, class R>
    static __device__ __forceinline__ void run(Storage<S>& storage, const Coords<S, L>& at, CandidateCount c,
                                               Bound bound, float sig0, const R& rescore) {
        auto place = [&](bool is_candidate, uint32_t rank, uint64_t composite, float sig) {
            if (is_candidate && rank < static_cast<uint32_t>(at.dims.topk())) {
                place_winner<S, C>(storage, at.local, rank, composite, sig, sig0);
            }
        };
        if constexpr (R::kRescores) {
            // More candidates than lanes: each is scored once and written
            // back, for the passes below that read the regions.
            if (c.count > static_cast<uint32_t>(S::kLanes)) {
                for (uint32_t i = static_cast<uint32_t>(at.lane); i < c.count; i += S::kLanes) {
                    uint32_t at_i = i;
                    const int r = region_of(storage, at.local, at_i);
                    Entry& entry = storage.cand.entry[at.local][r][at_i];
                    const Scored exact = rescore(static_cast<uint32_t>(entry.composite));
                    entry.composite = exact.composite;
                    entry.sig = exact.sig;
                }
                L::sync();
            }
        }
        if (c.count <= static_cast<uint32_t>(S::kLanes)) {
            // One candidate per lane; its rank = how many lanes hold a larger
            // composite. Lanes without one hold 0, smaller than every
            // candidate.
            const bool is_candidate = static_cast<uint32_t>(at.lane) < c.count;
            const Found mine = is_candidate ? candidate(storage, at.local, static_cast<uint32_t>(at.lane), rescore) : Found{0u, 0.0f};
            const uint64_t me = mine.composite;
            if constexpr (RADIX4_RANK_PACKED) {
                // By the packed words (packs); a lane without a candidate
                // holds 0, which is larger than no candidate.
                if (__builtin_expect(packs(bound), 1)) {
                    const uint32_t packed = is_candidate ? packed_word(me, bound.lo) : 0u;
                    place(is_candidate, lanes_larger<S, L>(packed), me, mine.sig);
                    RADIX4_NOTE_PATH(RankPath::kPacked);
                    return;
                }
            }
            if constexpr (RADIX4_RANK_KEY32) {
                // By the rank key alone: with no two candidates' keys equal,
                // the ranks are 0 .. C - 1 (a lane without a candidate holds
                // key 0, larger than none). Equal keys share the rank of
                // their first, so the sum falls short: then the composites.
                const uint32_t rank = lanes_larger<S, L>(static_cast<uint32_t>(me >> 32));
                // Placed before the check, which then only decides whether
                // to place again (the placement does not wait for the sum):
                // the placements by the whole composites below follow a
                // barrier of the group and cover every output position
                // (C >= k), so they overwrite whatever equal keys put anywhere.
                place(is_candidate, rank, me, mine.sig);
                const bool keys_distinct = L::sum(is_candidate ? rank : 0u) == c.count * (c.count - 1u) / 2u;
                if (__builtin_expect(keys_distinct, 1)) {
                    RADIX4_NOTE_PATH(RankPath::kKeys);
                    return;
                }
                L::sync();
            }
            uint32_t part[2] = {0, 0};
#pragma unroll
            for (int d = 1; d < S::kLanes; ++d) {
                const uint32_t hi = L::shfl_xor(static_cast<uint32_t>(me >> 32), d);
                const uint32_t low = L::shfl_xor(static_cast<uint32_t>(me), d);
                part[d & 1] += static_cast<uint32_t>(((static_cast<uint64_t>(hi) << 32) | low) > me);
            }
            place(is_candidate, part[0] + part[1], me, mine.sig);
            RADIX4_NOTE_PATH(RankPath::kComposites);
            return;
        }
        if constexpr (RADIX4_RANK_PACKED) {
            // Up to two candidates a lane (C <= 2 * lanes), by the packed
            // words when they pack: each lane compares its two words with the
            // other lanes' two (2 shuffles a lane) and with each other,
            // counting the words not larger by carries (L::add_if_at_least,
            // as lanes_larger). These are the block shape's rows with more
            // candidates than a warp's lanes, about one in 45 random rows at
            // 896/16, which the region loop below took about 900 cycles
            // longer than other rows (0.5 us a batch that holds one). A lane
            // without a candidate holds 0, larger than none.
            if (__builtin_expect(c.count <= 2u * S::kLanes && packs(bound), 1)) {
                Found mine[2];
                uint32_t word[2];
#pragma unroll
                for (int t = 0; t < 2; ++t) {
                    const uint32_t i = static_cast<uint32_t>(at.lane + t * S::kLanes);
                    mine[t] = i < c.count ? candidate(storage, at.local, i) : Found{0u, 0.0f};
                    word[t] = i < c.count ? packed_word(mine[t].composite, bound.lo) : 0u;
                }
                // Two chains of adds per candidate; the lane's own other word first.
                uint32_t not_larger[2][2] = {{0u, 0u}, {0u, 0u}};
                L::add_if_at_least(not_larger[0][0], word[0], word[1]);
                L::add_if_at_least(not_larger[1][0], word[1], word[0]);
#pragma unroll
                for (int d = 1; d < S::kLanes; ++d) {
                    const uint32_t first = L::shfl_xor(word[0], d), second = L::shfl_xor(word[1], d);
#pragma unroll
                    for (int t = 0; t < 2; ++t) {
                        L::add_if_at_least(not_larger[t][d & 1], word[t], first);
                        L::add_if_at_least(not_larger[t][d & 1], word[t], second);
                    }
                }
#pragma unroll
                for (int t = 0; t < 2; ++t) {
                    const bool is_candidate = static_cast<uint32_t>(at.lane + t * S::kLanes) < c.count;
                    const uint32_t larger = static_cast<uint32_t>(2 * S::kLanes - 1) - (not_larger[t][0] + not_larger[t][1]);
                    place(is_candidate, larger, mine[t].composite, mine[t].sig);
                }
                RADIX4_NOTE_PATH(RankPath::kPackedPairs);
                return;
            }
        }
        RADIX4_NOTE_PATH(RankPath::kRegions);
        // Up to kRankMax: a lane ranks two candidates per pass (first, first
        // + kLanes) against every region, four entries of each per step
        // (entries past a region's count are 0), in a loop not unrolled
        // further to keep the code small; each entry read serves both.
        for (uint32_t first = static_cast<uint32_t>(at.lane); first < c.count; first += 2 * S::kLanes) {
            uint64_t me[2];
            float msig[2];
            uint32_t part[2][4];  // four chains of adds per candidate, not one
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                const uint32_t i = first + static_cast<uint32_t>(t * S::kLanes);
                const Found f = i < c.count ? candidate(storage, at.local, i) : Found{~uint64_t{0}, 0.0f};  // nothing is larger
                me[t] = f.composite, msig[t] = f.sig;
#pragma unroll
                for (int e = 0; e < 4; ++e) part[t][e] = 0;
            }
#pragma unroll 1
            for (uint32_t q = 0; q < c.longest; q += 4) {
#pragma unroll
                for (int w = 0; w < S::kWarps; ++w) {
#pragma unroll
                    for (uint32_t e = 0; e < 4; ++e) {
                        const uint64_t other = storage.cand.composite(at.local, w, q + e);
#pragma unroll
                        for (int t = 0; t < 2; ++t) part[t][e] += static_cast<uint32_t>(other > me[t]);
                    }
                }
            }
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                const uint32_t rank = (part[t][0] + part[t][1]) + (part[t][2] + part[t][3]);
                place(first + static_cast<uint32_t>(t * S::kLanes) < c.count, rank, me[t], msig[t]);
            }
        }
    }
};

// ---- step 3c: the radix select, when the candidates are too many ----

// A value wins iff (key >> kshift) > khi, or equal and valid and
// (inv_priority >> qshift) >= qhi.
struct Cutoff {
    uint32_t kshift, khi, qshift, qhi;

    // Every key equal to kmax: the winners are the k first in tie priority.
    // (Inverted priorities: the k first hold E - k .. E - 1, phantoms included
    // among the losers.)
    template <class S>
    static __device__ __forceinline__ Cutoff all_equal(uint32_t kmax, Dims<S> dims) {
        return Cutoff{0u, kmax, 0u, static_cast<uint32_t>(S::E - dims.topk())};
    }
};

template <class S, class L>
struct RadixSelect {
    static_assert(S::E < (1 << 16), "a token's bin counts are 16-bit halves of a word");

    // Radix rounds, 4 bits each, from digit position `shift` down:
    // digit(j, shift, base) is value j's digit there if its higher digits
    // equal `base`, else anything >= 16. Each round narrows `hi` by the
    // cutoff bin's digit and `needed` by the winners above it. True when a
    // cutoff bin holds exactly the winners still needed (`shift` then names
    // that round), false when the digits ran out first.
    template <class Digit>
    static __device__ __forceinline__ bool rounds(int& shift, uint32_t& hi, uint32_t& needed, Digit digit,
                                                  TokenExchange<S, L>& exchange, const Coords<S, L>& at) {
        for (;;) {
            const uint32_t base = hi << 4;
            Histogram<L, S::kVals> round;
#pragma unroll
            for (int j = 0; j < S::kVals; ++j) round.add(j, digit(j, shift, base));
            uint32_t sums[8];
            round.words(sums);
            exchange.sum(sums, at);
            const Pick r = pick_bin(sums, needed);
            needed -= r.above;
            hi = base | r.digit;
            if (r.in_bin == needed) return true;
            if (shift == 0) return false;
            shift -= 4;
        }
    }

    // From the first bit where lo and max differ (with none, at least k keys
    // equal the max); the priority digits only if whole keys tie.
    template <class C>
    static __device__ __forceinline__ Cutoff run(const Slice<S, C>& slice, const Bound& bound,
                                                 TokenExchange<S, L>& exchange, const Coords<S, L>& at) {
        Cutoff cut{0u, bound.kmax, 31u, 0u};
        const uint32_t differ = bound.lo ^ bound.kmax;
        uint32_t needed = static_cast<uint32_t>(at.dims.topk());
        bool key_tied = true;  // whole keys tie at the cutoff: rank them by priority
        if (differ != 0u) {
            int shift = (31 - L::count_leading_zeros(differ)) & ~3;
            uint32_t hi = shift >= 28 ? 0u : bound.kmax >> (shift + 4);
            key_tied = !rounds(shift, hi, needed, [&](int j, int sh, uint32_t base) { return (slice.key[j] >> sh) - base; },
                               exchange, at);
            cut.kshift = static_cast<uint32_t>(shift);  // 0 when key_tied: the rounds ran to the last digit
            cut.khi = hi;
        }
        if (key_tied) {
            // `needed` of the keys equal to khi win, by tie priority.
            // Priorities are distinct, so by qs = 0 the bin holds exactly one.
            int qs = S::kPrioBits - 4;
            uint32_t qh = 0;
            const uint32_t khi = cut.khi;
            rounds(qs, qh, needed, [&](int j, int sh, uint32_t base) {
                return (slice.valid(j) && slice.key[j] == khi) ? (slice.inv_priority(j) >> sh) - base : 16u;
            }, exchange, at);
            cut.qshift = static_cast<uint32_t>(qs);
            cut.qhi = qh;
        }
        return cut;
    }
};

// ---- step 4: gather the radix path's winners, then place each by its rank ----

template <class S, class L>
struct GatherStep {
    static_assert(S::K <= S::kLanes, "one lane of the first group places each winner");

    // Returns false on the groups that are done (all but the first).
    template <class C, class R>
    static __device__ __forceinline__ bool run(const Slice<S, C>& slice, const Cutoff& cut, Storage<S>& storage,
                                               const Coords<S, L>& at, const R& rescore) {
        uint64_t won = 0;
#pragma unroll
        for (int j = 0; j < S::kVals; ++j) {
            const uint32_t top = slice.key[j] >> cut.kshift;
            const bool win = top > cut.khi || (top == cut.khi && slice.valid(j) && (slice.inv_priority(j) >> cut.qshift) >= cut.qhi);
            won |= static_cast<uint64_t>(win) << j;
        }
        const uint32_t n_won = static_cast<uint32_t>(__popcll(won));
        uint32_t slot;
        if constexpr (S::kShared) {
            // Slots in arrival order: the placement below does not depend on it.
            slot = n_won ? atomicAdd(&storage.winner_count, n_won) : 0u;
        } else {
            slot = L::exclusive_scan(n_won);
        }
        Entry* mine = storage.winners[at.local];
#pragma unroll
        for (int j = 0; j < S::kVals; ++j) {
            if ((won >> j) & 1u) mine[slot++] = Entry{slice.composite(j), R::kRescores ? 0.0f : slice.sig[j], slice.expert_of(j)};
        }
        TokenExchange<S, L>::sync();
        if (S::kShared && at.warp != 0) return false;
        const float sig0 = expert_zero_sig<S, L>(slice, rescore);
        const int k = at.dims.topk();
        if (at.lane < k) {
            const Entry w = mine[at.lane];
            uint32_t rank = 0;
#pragma unroll
            for (int i = 0; i < S::K; ++i) rank += static_cast<uint32_t>(i < k && mine[i].composite > w.composite);
            float sig = w.sig;
            if constexpr (R::kRescores) sig = rescore.sig(w.id);
            place_winner<S, C>(storage, at.local, rank, w.composite, sig, sig0);
        }
        L::sync();
        return true;
    }
};

// ---- step 5: weights, in output order; the total is summed in that order too ----

template <class S, class L>
struct WriteStep {
    static_assert(S::K <= S::kLanes, "one lane writes each output position");

    template <class C>
    static __device__ __forceinline__ void run(const Storage<S>& storage, const Coords<S, L>& at, int renormalize,
                                               float routed_scaling_factor, float* weights, int32_t* ids) {
        // Every lane reads its position (lanes past k the last one, and store
        // nothing) before the total's chain of adds, which hides those
        // reads; behind an `if (lane < k)` the compiler sank them below the
        // chain.
        const int k = at.dims.topk();
        const bool writes = at.lane < k;
        const int i = writes ? at.lane : k - 1;
        const float sig = storage.ranked_sig[at.local][i];
        const int32_t id = storage.ranked_id[at.local][i];
        const int64_t out = static_cast<int64_t>(at.token) * k + i;
        float total = 0.0f;
#pragma unroll
        for (int r = 0; r < S::K; ++r) total += r < k ? storage.ranked_sig[at.local][r] : 0.0f;
        L::store_global_if(writes, weights + out, C::weight(sig, total, renormalize, routed_scaling_factor));
        L::store_global_if(writes, ids + out, id);
    }
};

// The approximate keys' exact way (route_kernel), out of line: inlined, its
// chains of loads and sigmoids shared registers with the rest of the
// kernel, and the dense kernel (128 registers) spilled 384 bytes for fp32
// logits. Out of line, only this rare way pays for the call: the keys come
// back as its return value, and the kernel's own slice stays in registers.
template <class S>
struct ExactKeys {
    uint32_t key[S::kVals];
    uint32_t lane_max;
};
template <class L, class Score, class Bias, int kVec, class S, class C>
__device__ __noinline__ ExactKeys<S> exact_keys_out_of_line(int tid, Dims<S> dims, const typename Score::Raw* row,
                                                            const typename Bias::Raw* bias, bool vec) {
    Slice<S, C> slice;
    slice.tid = tid;
    slice.dims = dims;
    slice.template exact_keys_for<L, Score, Bias, kVec>(row, bias, vec);
    ExactKeys<S> out;
#pragma unroll
    for (int j = 0; j < S::kVals; ++j) out.key[j] = slice.key[j];
    out.lane_max = slice.lane_max;
    return out;
}

// ---- the kernel ----

// Steps:
//   1. Load, sigmoid, rank keys (Slice): each thread's share of the token.
//   2. Bound (BoundStep): each lane group reduces the max of its keys and
//      ranks its lanes' maxima against each other (lane shuffles):
//      the k-th largest lane maximum is reached by at least k keys. With
//      several groups, each also gives its ceil(k / m)-th largest lane
//      maximum for m = 1 .. groups, and these meet in shared memory (one
//      barrier): the m-th largest of them over the groups is reached by k
//      keys too, and lo is the largest such bound.
//   3a. Copy (CopyStep): every key >= lo (C of them, a few dozen) goes to
//      its group's region of shared memory; one barrier. If lo == max and
//      C == E, every key is equal and the winners are the k first in tie
//      priority: no selection.
//   3b. Rank (RankStep): if C <= RADIX4_RANK_MAX the first group ranks each
//      candidate by counting the larger composites (with C <= lanes, one
//      candidate per lane and lane shuffles, by packed words of key - lo
//      and tie priority when the keys' span leaves room; else reading the
//      regions);
//      ranks below k are the winners, already in output order. The other
//      groups are done.
//   3c. Radix select (RadixSelect): otherwise (wide tie pools, NaN rows) the
//      copy is dropped and the radix rounds run from the first bit where lo
//      and max differ, then (GatherStep) the winners are gathered and placed
//      by rank.
//   4. Write (WriteStep): the weights in output order.
// With approximate keys (kApproximate: the dense kernel, approximate_key's
// comment) steps 1-3a run on approximate keys with a margin, the rank step
// scores its candidates exactly (Rescore), and a token the approximate
// keys cannot serve takes the exact keys and steps 2-3a again.
//
// kMinBlocks: ptxas keeps registers low enough for that many blocks per SM
// (1: as many registers as it likes, no spills).
//
// kDynamic: the generic path (Shape); `experts` and `topk` are read only then.
template <class C, class L, int E, int K, class Score, class Bias, int kVec, int kWarpsPerToken, int kTokensPerBlock,
          int kMinBlocks = 1, bool kDynamic = false>
__global__ void __launch_bounds__(L::kLanes * kWarpsPerToken * kTokensPerBlock, kMinBlocks)
route_kernel(const typename Score::Raw* __restrict__ scores, int64_t row_stride,
             const typename Bias::Raw* __restrict__ bias, int rows, int mode, float routed_scaling_factor,
             float* __restrict__ weights, int32_t* __restrict__ ids, int experts, int topk) {
    using S = Shape<L, E, K, kWarpsPerToken, kTokensPerBlock, kDynamic>;
    constexpr bool kApproximate = kApproximateKeys<S, C, L, kMinBlocks>;
    static_assert(!kDynamic || C::kGroups == 1, "expert groups have fixed shapes");
    const Dims<S> dims{experts, topk};
    constexpr bool kLateTrigger = RADIX4_PDL_LATE_TRIGGER && !S::kShared;
    // The dependent grid may start now: it waits for this one to complete
    // before it reads anything this grid writes.
    if constexpr (!kLateTrigger) L::launch_dependents();
    __shared__ Storage<S> storage;
    const Coords<S, L> at = Coords<S, L>::here(dims);
    if (at.token >= rows) return;  // whole warps leave together
    RADIX4_STAMP(0);

    Slice<S, C> slice;
    slice.tid = at.tid;
    slice.dims = dims;
    const typename Score::Raw* row = scores + static_cast<int64_t>(at.token) * row_stride;
    // kVec 2: vector loads where this row and the bias allow them (and,
    // on the generic path, whole vectors of 4 experts).
    const bool vec = kVec != 2 || ((reinterpret_cast<uintptr_t>(row) % (4 * sizeof(typename Score::Raw))) |
                                   (reinterpret_cast<uintptr_t>(bias) % (4 * sizeof(typename Bias::Raw))) |
                                   static_cast<uintptr_t>(dims.experts() % 4)) == 0;
    {
        float x[S::kVals], b[S::kVals];
        slice.template load<L, Score, Bias, kVec>(row, bias, x, b, vec);
        // Cleared while the loads are in flight.
        if constexpr (S::kRankMax > 0) CopyStep<S, L>::clear(storage, at);
        // `mode` bit 4: a kChosen contract's sqrt(softplus(x)), for the whole launch.
        if constexpr (C::kScore == ScoreFn::kChosen) {
            if ((mode & 4) != 0) {
                slice.template compute_keys<L, Score, Bias, kVec, true>(row, bias, x, b, vec);
            } else {
                slice.template compute_keys<L, Score, Bias, kVec, false>(row, bias, x, b, vec);
            }
        } else {
            slice.template compute_keys<L, Score, Bias, kVec, false, kApproximate>(row, bias, x, b, vec);
        }
    }
    if constexpr (C::kGroups > 1) GroupStep<S, L>::run(slice, storage);
    if (S::kShared && threadIdx.x == 0) storage.winner_count = 0;  // ordered by the first barrier below
    RADIX4_STAMP(1);

    TokenExchange<S, L> exchange(storage);
    Bound bound = slice.phased_lo != 0u ? Bound{L::all_max(slice.lane_max), slice.phased_lo}
                                        : BoundStep<S, L>::run(slice, at, exchange);
    RADIX4_STAMP(2);

    using R = std::conditional_t<kApproximate, Rescore<S, L, C, Score, Bias>, NoRescore>;
    R rescore;
    if constexpr (R::kRescores) rescore = R{row, bias};
    bool ranked = false;  // the rank step placed the winners
    bool all_equal = false;
    if constexpr (S::kRankMax > 0) {
        // With approximate keys, the copy of those within the margin first;
        // the exact way (every value's key, the bound and the copy again)
        // when it cannot serve (ApproximateBound::exact, too many
        // candidates). The token's lanes decide together.
        bool rank = false;
        CandidateCount c{0, 0};
        Bound ranks = bound;
        if constexpr (kApproximate) {
            const ApproximateBound approximate = ApproximateBound::of<L>(bound);
            if (__builtin_expect(!approximate.exact, 1)) {
                c = CopyStep<S, L>::run_approximate(slice, approximate.lo, storage, at);
                rank = c.count <= static_cast<uint32_t>(S::kRankMax);
                ranks = approximate.ranks;
            }
            if (__builtin_expect(!rank, 0)) {
                RADIX4_NOTE_KEYS(KeyPath::kExact);
                const ExactKeys<S> exact = exact_keys_out_of_line<L, Score, Bias, kVec, S, C>(slice.tid, dims, row, bias, vec);
#pragma unroll
                for (int j = 0; j < S::kVals; ++j) slice.key[j] = exact.key[j];
                slice.lane_max = exact.lane_max;
                CopyStep<S, L>::clear(storage, at);  // the approximate copy may have filled entries
                bound = BoundStep<S, L>::run(slice, at, exchange);
                ranks = bound;
            } else {
                RADIX4_NOTE_KEYS(KeyPath::kApproximate);
            }
        }
        if (!rank) {
            c = CopyStep<S, L>::template run<kApproximate>(slice, bound.lo, storage, at);
            rank = c.count <= static_cast<uint32_t>(S::kRankMax);
        }
        if (__builtin_expect(rank, 1)) {
            ranked = true;
            if (S::kShared && at.warp != 0) return;  // no further barrier
            RankStep<S, L>::template run<C>(storage, at, c, ranks, expert_zero_sig<S, L>(slice, rescore), rescore);
        } else {
            // Every key equal (lo is some key, so every key >= lo == max
            // means every key == max): no selection, the k first in tie
            // priority win. (Counted here rather than by a min of the keys.)
            all_equal = bound.lo == bound.kmax && c.count == static_cast<uint32_t>(dims.experts());
        }
    }
    if (__builtin_expect(!ranked, 0)) {
        RADIX4_NOTE_PATH(RankPath::kRadix);
        const Cutoff cut = all_equal ? Cutoff::all_equal<S>(bound.kmax, dims) : RadixSelect<S, L>::run(slice, bound, exchange, at);
        if (!GatherStep<S, L>::run(slice, cut, storage, at, rescore)) return;
    } else {
        L::sync();  // the ranking group's placements, before its reads below
    }
    RADIX4_STAMP(4);

    if constexpr (kLateTrigger) L::launch_dependents();
    WriteStep<S, L>::template run<C>(storage, at, mode, routed_scaling_factor, weights, ids);
    RADIX4_STAMP(5);
}

}  // namespace radix4
