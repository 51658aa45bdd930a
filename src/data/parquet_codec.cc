// Page decompression for the Parquet reader (see parquet_codec.h): libsnappy's C API, zlib's
// inflate and libzstd's one-shot decompression, each into a buffer of the declared size.
#include "data/parquet_codec.h"

#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "data/parquet_meta.h"

namespace vt::data::parquet {
namespace {

absl::Status wrong_size(const char* codec, size_t got, size_t want) {
  return absl::DataLossError(absl::StrCat("a ", codec, " page decompresses to ", got,
                                          " bytes where its header says ", want));
}

absl::Status inflate_page(const uint8_t* src, size_t n, uint8_t* dst, size_t out_size) {
  z_stream zs{};
  if (inflateInit2(&zs, 32 + MAX_WBITS) != Z_OK) return absl::InternalError("zlib: inflateInit2 failed");
  zs.next_in = const_cast<Bytef*>(src);
  zs.avail_in = static_cast<uInt>(n);
  zs.next_out = dst;
  zs.avail_out = static_cast<uInt>(out_size);
  absl::Status st;
  for (;;) {
    const int rc = inflate(&zs, Z_FINISH);
    if (rc == Z_STREAM_END) {
      if (zs.avail_in > 0 && zs.avail_out > 0) {  // another gzip member follows
        if (inflateReset(&zs) != Z_OK) st = absl::InternalError("zlib: inflateReset failed");
        if (st.ok()) continue;
      }
      break;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && zs.avail_out == 0) {
      st = absl::DataLossError(absl::StrCat("a GZIP page decompresses to more than the ", out_size,
                                            " bytes its header says"));
    } else if (rc == Z_BUF_ERROR) {
      st = absl::DataLossError("a GZIP page is truncated (its stream ends early)");
    } else {
      st = absl::DataLossError(absl::StrCat("a GZIP page is corrupt (zlib: ", zs.msg ? zs.msg : "error", ")"));
    }
    break;
  }
  const size_t got = out_size - zs.avail_out;
  inflateEnd(&zs);
  if (st.ok() && got != out_size) st = wrong_size("GZIP", got, out_size);
  return st;
}

}  // namespace

bool codec_supported(int32_t codec) {
  return codec == kUncompressed || codec == kSnappy || codec == kGzip || codec == kZstd;
}

absl::Status decompress_page(int32_t codec, const uint8_t* src, size_t n, uint8_t* dst, size_t out_size) {
  if (n == 0 && out_size == 0) return absl::OkStatus();
  switch (codec) {
    case kUncompressed:
      if (n != out_size) return wrong_size("UNCOMPRESSED", n, out_size);
      std::copy(src, src + n, dst);
      return absl::OkStatus();
    case kSnappy: {
      size_t len = 0;
      const char* in = reinterpret_cast<const char*>(src);
      if (snappy_uncompressed_length(in, n, &len) != SNAPPY_OK)
        return absl::DataLossError("a SNAPPY page is corrupt (no valid length prefix)");
      if (len != out_size) return wrong_size("SNAPPY", len, out_size);
      size_t got = out_size;
      if (snappy_uncompress(in, n, reinterpret_cast<char*>(dst), &got) != SNAPPY_OK)
        return absl::DataLossError("a SNAPPY page is corrupt (libsnappy rejects it)");
      if (got != out_size) return wrong_size("SNAPPY", got, out_size);
      return absl::OkStatus();
    }
    case kGzip: return inflate_page(src, n, dst, out_size);
    case kZstd: {
      const size_t got = ZSTD_decompress(dst, out_size, src, n);
      if (ZSTD_isError(got)) {
        if (ZSTD_getErrorCode(got) == ZSTD_error_dstSize_tooSmall)
          return absl::DataLossError(absl::StrCat("a ZSTD page decompresses to more than the ", out_size,
                                                  " bytes its header says"));
        return absl::DataLossError(absl::StrCat("a ZSTD page is corrupt (", ZSTD_getErrorName(got), ")"));
      }
      if (got != out_size) return wrong_size("ZSTD", got, out_size);
      return absl::OkStatus();
    }
    default:
      return absl::UnimplementedError(absl::StrCat("compression codec ", codec_name(codec),
                                                   " is not supported"));
  }
}

}  // namespace vt::data::parquet
