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
constexpr TieTable<E> make_tie_table() {
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

template <int E>
constexpr int tie_priority(int expert) {
    return 4 * (make_tie_table<E>().vec_base[(expert >> 2) & 63] + (expert >> 8)) + (expert & 3);
}

}  // namespace radix4
