// Decompression of one Parquet page (a whole block, its sizes known from the page header):
// UNCOMPRESSED, SNAPPY (libsnappy's raw format), GZIP (zlib; gzip members, concatenated ones
// too, or a bare zlib stream as some writers produce) and ZSTD (libzstd; concatenated frames too).
// The output must be exactly the size the header declares: more or fewer bytes, or a stream the
// library rejects, is an error saying so. Other codecs (LZO, BROTLI, LZ4, LZ4_RAW) are refused by
// name. The libraries validate their input, so hostile bytes give an error, never a read or write
// outside the buffers.
#pragma once
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace vt::data::parquet {

// Whether `codec` (parquet.thrift's CompressionCodec) is one this reader decompresses.
bool codec_supported(int32_t codec);

// Decompresses src[0, n) into dst[0, out_size); the result must fill dst exactly.
absl::Status decompress_page(int32_t codec, const uint8_t* src, size_t n, uint8_t* dst, size_t out_size);

}  // namespace vt::data::parquet
