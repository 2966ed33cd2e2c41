// Test helpers for strided copies: random non-aliasing strides and a byte-by-byte
// reference copy that every faster path is checked against.
#ifndef REFIT_TRANSPORT_TESTING_STRIDED_REFERENCE_H_
#define REFIT_TRANSPORT_TESTING_STRIDED_REFERENCE_H_

#include <cstdint>
#include <random>

#include "transport/strided_copy.h"

namespace refit::transport::testing {

// A random box of 1 to `max_rank` dims, each 1 to `max_extent` long.
Dims RandomExtent(std::mt19937& rng, size_t max_rank, int64_t max_extent);

// Non-aliasing strides for `extent`: dims laid out in a random order, with random padding.
Dims RandomStrides(std::mt19937& rng, const Dims& extent);

// Elements spanned by a box with these strides (last element's offset + 1).
int64_t Span(const Dims& extent, const Dims& strides);

// Byte-by-byte reference of CopyBox.
void ReferenceCopy(const Dims& extent, int eb, const uint8_t* src, const Dims& ss, uint8_t* dst,
                   const Dims& ds);

}  // namespace refit::transport::testing

#endif  // REFIT_TRANSPORT_TESTING_STRIDED_REFERENCE_H_
