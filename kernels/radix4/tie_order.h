// Tie priority of the `aiter` contract: the order in which aiter's generic
// wave64 kernel visits experts, so that equal rank keys are broken as aiter
// breaks them. Plain constexpr C++ (no device code): the kernels instantiate
// it into device memory and CI compiles it on the host to check it against
// the contract's closed form.
//
// Fact (docs/contracts.md#the-tie-table): experts are read in vectors of 4;
// vector g = e >> 2 lives on lane g & 63, bank g >> 6. Lane L is visited at
// rank kLaneRank[L] (lower rank wins ties). The priority of expert e is its
// position when experts are sorted by (kLaneRank[lane(e)], e); lower wins.
// This file carries its own copy of the table on purpose: the harness's
// oracle has another, and a differential test only catches an error that
// the two sides do not share.
#pragma once

#include <stdint.h>

namespace radix4 {

// Host and device (nvcc rejects a device call of a host-only constexpr
// function, even inside a static_assert).
#if defined(__CUDACC__) || defined(__HIPCC__)
#define RADIX4_TIE_HD __host__ __device__
#else
#define RADIX4_TIE_HD
#endif

constexpr uint8_t kLaneRank[64] = {
    56, 57, 58, 59, 63, 62, 61, 60, 52, 53, 54, 55, 51, 50, 49, 48,
    40, 41, 42, 43, 47, 46, 45, 44, 36, 37, 38, 39, 35, 34, 33, 32,
    24, 25, 26, 27, 31, 30, 29, 28, 20, 21, 22, 23, 19, 18, 17, 16,
    8,  9,  10, 11, 15, 14, 13, 12, 4,  5,  6,  7,  3,  2,  1,  0,
};

// vec_base[L]: how many vectors aiter visits before the first vector of
// lane L. Within a lane vectors go in bank order, so
//   priority(e) = 4 * (vec_base[(e >> 2) & 63] + (e >> 8)) + (e & 3).
template <int E>
struct TieTable {
    uint16_t vec_base[64];
};

template <int E>
RADIX4_TIE_HD constexpr TieTable<E> make_tie_table() {
    static_assert(E % 4 == 0, "aiter reads experts in vectors of 4: E must be a multiple of 4");
    static_assert(E >= 4 && E <= 4096, "the tie priority is packed in 12 bits: 4 <= E <= 4096");
    constexpr int kVectors = E / 4;
    TieTable<E> table{};
    for (int lane = 0; lane < 64; ++lane) {
        int before = 0;
        for (int other = 0; other < 64; ++other) {
            if (kLaneRank[other] < kLaneRank[lane] && other < kVectors) {
                before += (kVectors - 1 - other) / 64 + 1;  // vectors held by lane `other`
            }
        }
        table.vec_base[lane] = static_cast<uint16_t>(before);
    }
    return table;
}

// The same two tables as arithmetic, for the kernels: a table in device
// memory is reached through its address in a constant bank of its own,
// whose first read each launch waits for L2 before the table's loads can
// even be issued (ncu: the warp kernel's largest stall site at M = 1024).
// Checked against the tables above at compile time (static_asserts below
// and in the kernel), so a wrong closed form cannot build.

// kLaneRank[L]: blocks of 8 lanes in descending order of rank (lanes 0..7
// hold ranks 56..63), inside a block 0 1 2 3 7 6 5 4, with the halves
// swapped in odd blocks.
RADIX4_TIE_HD constexpr uint32_t lane_rank(uint32_t lane) {
    const uint32_t block = (lane >> 3) & 7u, j = lane & 7u;
    const uint32_t inner = (j ^ (((j >> 2) & 1u) * 3u)) ^ ((block & 1u) << 2);
    return ((7u - block) << 3) | inner;
}

RADIX4_TIE_HD constexpr bool lane_rank_matches_table() {
    for (int lane = 0; lane < 64; ++lane) {
        if (lane_rank(static_cast<uint32_t>(lane)) != kLaneRank[lane]) return false;
    }
    return true;
}
static_assert(lane_rank_matches_table(), "lane_rank() must reproduce kLaneRank");

// vec_base in closed form. With V = E / 4 = 64 Q + R vectors, lane L holds
// Q + (L < R) of them; when R is a multiple of 8 the lanes below R are whole
// blocks, exactly those of rank >= 64 - R, so the vectors before lane L are
// Q per lower rank plus one per lower rank at or above 64 - R.
template <int E>
constexpr bool kVecBaseClosedForm = ((E / 4) % 64) % 8 == 0;

template <int E>
RADIX4_TIE_HD constexpr uint32_t vec_base_closed(uint32_t lane) {
    constexpr uint32_t kQ = static_cast<uint32_t>((E / 4) / 64), kR = static_cast<uint32_t>((E / 4) % 64);
    const uint32_t rank = lane_rank(lane);
    return kQ * rank + (rank > 64u - kR ? rank - (64u - kR) : 0u);
}

template <int E>
RADIX4_TIE_HD constexpr bool vec_base_closed_matches_table() {
    constexpr TieTable<E> table = make_tie_table<E>();
    for (int lane = 0; lane < 64; ++lane) {
        if (vec_base_closed<E>(static_cast<uint32_t>(lane)) != table.vec_base[lane]) return false;
    }
    return true;
}
static_assert(vec_base_closed_matches_table<896>() && vec_base_closed_matches_table<384>() &&
                  vec_base_closed_matches_table<224>() && vec_base_closed_matches_table<256>(),
              "vec_base_closed() must reproduce make_tie_table() for the kernels' shapes");

template <int E>
constexpr int tie_priority(int expert) {
    return 4 * (make_tie_table<E>().vec_base[(expert >> 2) & 63] + (expert >> 8)) + (expert & 3);
}

}  // namespace radix4
