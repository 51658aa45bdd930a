// DenseFormer (Pagliardini et al. 2024; docs/model.md "DenseFormer"): after block i a
// depth-weighted average y_i = sum_{j in S_i} a_ij x_j feeds block i+1 (and, after the last
// block, the output head), where x_0 is the embedding output and x_j the output of block j-1.
// With --dense-period p an average follows only blocks i with (i+1) % p == 0 (else y_i = x_{i+1});
// with --dense-dilation k, S_i = {j <= i+1 : (i+1-j) % k == 0}. a = blocks.i.dwa (|S_i| weights
// in increasing j), starting at 1 on x_{i+1} and 0 elsewhere. Under pipeline parallelism the
// x_j that later averages read travel with the activations (Bundle::dense), and only those.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace vt {

class ParamRegistrar;

namespace dense {

// Is there an average after block i?
bool has_average(const ModelConfig& cfg, int block);
// S_i, increasing (ends with i + 1); empty without an average.
std::vector<int> inputs(const ModelConfig& cfg, int block);
// Is x_j read by an average after some block i >= first_block?
bool read_from(const ModelConfig& cfg, int j, int first_block);
// Registers blocks.i.dwa when block i has an average; returns its index or -1.
int register_weights(ParamRegistrar& r, int block);

}  // namespace dense
}  // namespace vt
