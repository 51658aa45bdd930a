// Dataset plans: pieces, their exchange, owners and coverage (see checkpoint_plan.h).
#include "checkpoint/checkpoint_plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace vt::ckpt {

absl::StatusOr<h5::Slab> split_box(const std::string& path, const Shape& local, const Shape& global,
                                   const ParamSplit& split) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": local shape ", shape_str(local),
                                                   " (split axis ", split.axis, " at offset ",
                                                   split.offset, ") does not fit the global shape ",
                                                   shape_str(global), ": ", why));
  };
  if (local.size() != global.size()) return bad("different ranks");
  h5::Slab box;
  box.start.assign(global.size(), 0);
  box.count = local;
  if (split.axis < -1 || split.axis >= static_cast<int>(global.size())) return bad("bad split axis");
  for (size_t d = 0; d < global.size(); ++d) {
    if (static_cast<int>(d) == split.axis) {
      if (split.offset < 0 || split.offset + local[d] > global[d]) return bad("slice out of range");
      box.start[d] = split.offset;
    } else if (local[d] != global[d]) {
      return bad("a dimension that is not split differs");
    }
  }
  return box;
}

absl::StatusOr<std::vector<Piece>> local_pieces(const ParamStore* store, bool params,
                                                const std::vector<NamedTensor>& extra) {
  std::vector<Piece> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& path, const Tensor& t, const Shape& global,
                 const ParamSplit& split) -> absl::Status {
    if (!t.defined() || t.dtype() != DType::kF32 || t.device() != Device::kCPU)
      return absl::InvalidArgumentError(absl::StrCat(path, ": checkpoints take f32 CPU tensors"));
    if (!seen.insert(path).second)
      return absl::InvalidArgumentError(absl::StrCat(path, " is given twice"));
    if (path.empty() || path[0] != '/')
      return absl::InvalidArgumentError(absl::StrCat("dataset path '", path, "' must start with /"));
    absl::StatusOr<h5::Slab> box = split_box(path, t.shape(), global, split);
    if (!box.ok()) return box.status();
    out.push_back({path, t.f32(), global, *std::move(box)});
    return absl::OkStatus();
  };
  if (params && store) {
    for (int i = 0; i < store->size(); ++i) {
      const ParamInfo& info = store->info(i);
      absl::Status st = add("/model/" + info.name, store->param(i), info.global_shape, info.split);
      if (!st.ok()) return st;
    }
  }
  for (const NamedTensor& t : extra) {
    Shape global = t.global_shape;
    ParamSplit split = t.split;
    if (global.empty() && t.tensor.defined()) {
      global = t.tensor.shape();
      split = {};
      // /optim/<param>/<kind>: the parameter's global shape and split.
      const std::string prefix = "/optim/";
      const size_t slash = t.path.rfind('/');
      if (store && t.path.rfind(prefix, 0) == 0 && slash > prefix.size()) {
        const int idx = store->find(t.path.substr(prefix.size(), slash - prefix.size()));
        if (idx >= 0) {
          const ParamInfo& info = store->info(idx);
          if (t.tensor.shape() != info.shape)
            return absl::InvalidArgumentError(absl::StrCat(
                t.path, " has shape ", shape_str(t.tensor.shape()), " but parameter ", info.name,
                " has the local shape ", shape_str(info.shape)));
          global = info.global_shape;
          split = info.split;
        }
      }
    }
    absl::Status st = add(t.path, t.tensor, global, split);
    if (!st.ok()) return st;
  }
  return out;
}

namespace {
struct Held {
  int rank;
  h5::Slab box;
};

bool overlap(const h5::Slab& a, const h5::Slab& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  for (size_t d = 0; d < a.start.size(); ++d)
    if (a.start[d] + a.count[d] <= b.start[d] || b.start[d] + b.count[d] <= a.start[d]) return false;
  return true;
}

std::string box_str(const h5::Slab& s) {
  std::string out = "[";
  for (size_t d = 0; d < s.start.size(); ++d)
    absl::StrAppend(&out, d ? ", " : "", s.start[d], ":", s.start[d] + s.count[d]);
  return out + "]";
}
}  // namespace

absl::StatusOr<std::vector<DatasetPlan>> plan_datasets(
    const CkptComm& comm, const std::vector<Piece>& pieces,
    const std::vector<std::pair<std::string, Shape>>& leading) {
  nlohmann::json mine = nlohmann::json::array();
  for (const Piece& p : pieces) mine.push_back({p.path, p.global, p.box.start, p.box.count});
  const std::vector<std::string> all = comm.all_gather(mine.dump());

  std::map<std::string, Shape> global;
  std::map<std::string, std::vector<Held>> held;
  for (const auto& [path, shape] : leading) global[path] = shape;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    const nlohmann::json j = nlohmann::json::parse(all[r]);
    for (const auto& e : j) {
      const std::string path = e[0].get<std::string>();
      const Shape g = e[1].get<Shape>();
      auto [it, fresh] = global.emplace(path, g);
      if (!fresh && it->second != g)
        return absl::InvalidArgumentError(absl::StrCat(
            path, " has global shape ", shape_str(g), " on rank ", r, " but ",
            shape_str(it->second), held[path].empty() ? " in the model" : " on another rank"));
      held[path].push_back({r, {e[2].get<std::vector<int64_t>>(), e[3].get<std::vector<int64_t>>()}});
    }
  }
  std::vector<std::string> order;
  std::set<std::string> in_order;
  for (const auto& l : leading)
    if (in_order.insert(l.first).second) order.push_back(l.first);
  for (const auto& [path, unused] : global)
    if (in_order.insert(path).second) order.push_back(path);

  std::map<std::string, int> my_piece;
  for (int i = 0; i < static_cast<int>(pieces.size()); ++i) my_piece[pieces[i].path] = i;

  std::vector<DatasetPlan> plan;
  for (const std::string& path : order) {
    DatasetPlan d;
    d.path = path;
    d.global = global[path];
    auto mp = my_piece.find(path);
    if (mp != my_piece.end()) d.piece = mp->second;
    // Distinct boxes and the lowest rank holding each (ranks arrive in increasing order).
    std::vector<Held> distinct;
    for (const Held& h : held[path]) {
      auto same = std::find_if(distinct.begin(), distinct.end(), [&](const Held& o) {
        return o.box.start == h.box.start && o.box.count == h.box.count;
      });
      if (same == distinct.end()) {
        for (const Held& o : distinct)
          if (overlap(o.box, h.box))
            return absl::InvalidArgumentError(absl::StrCat(
                path, ": rank ", o.rank, " holds ", box_str(o.box), " and rank ", h.rank,
                " holds ", box_str(h.box), ", which overlap without being the same slice"));
        distinct.push_back(h);
        d.held += h.box.numel();
        if (h.rank == comm.rank()) d.owner = true;
      }
    }
    d.covered = d.held == shape_numel(d.global);
    plan.push_back(std::move(d));
  }
  return plan;
}

}  // namespace vt::ckpt
