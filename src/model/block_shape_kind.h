// The registry of block shapes (docs/model.md, "Block shapes"): the BlockShapeKind key, its
// name, and the BlockShape object that implements it (src/model/blocks/). Adding a shape: its
// file under blocks/, one enum entry and one row of the table in block_shape.cc, its tests.
#pragma once
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vt {

enum class BlockShapeKind { kPrenorm, kParallel, kVSkipInit, kSas, kSasP };

class BlockShape;

const std::vector<BlockShapeKind>& all_block_shapes();
const char* block_shape_name(BlockShapeKind s);
absl::StatusOr<BlockShapeKind> parse_block_shape(const std::string& name);
const BlockShape& block_shape(BlockShapeKind s);

}  // namespace vt
