#include "planner/quantization.h"

#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace refit::planner {
namespace {

// A destination tensor quantized from its sources' wider dtype.
struct Recipe {
  std::string scale_tensor;
  std::string scheme;
  std::string rule;  // Quantization.recipe: how a block's scale and codes are made
  std::string source_dtype;
  Dims shape;
  Dims block;
  // False when the sources already hold the quantized dtype: nothing to derive.
  bool derived = false;
};

Dims ShapeOf(const v1::TensorSpec& t) { return Dims(t.shape().begin(), t.shape().end()); }

Box BoxOfView(const v1::ShardView& v) {
  return Box{Dims(v.offset().begin(), v.offset().end()),
             Dims(v.extent().begin(), v.extent().end())};
}

std::string BlockText(const Dims& block) { return absl::StrJoin(block, " x "); }

std::string ShapeText(const Dims& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status Invalid(const std::string& what) { return absl::InvalidArgumentError(what); }

// Whether `box` (of a view whose dims match the tensor's) is whole blocks: it starts at a
// block corner and ends at a block edge or the tensor's end. A box holding nothing is.
// With `tiled_only`, only the dims the blocks tile (a block shorter than the tensor) count:
// a block spanning a whole dim (per-channel or per-tensor scales) may be cut there.
bool WholeBlocks(const Box& box, const Dims& block, const Dims& shape, bool tiled_only = false) {
  if (box.offset.size() != shape.size() || box.extent.size() != shape.size()) return true;
  for (int64_t e : box.extent) {
    if (e == 0) return true;
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (tiled_only && block[d] >= shape[d]) continue;
    const int64_t end = box.offset[d] + box.extent[d];
    if (box.offset[d] % block[d] != 0 || (end % block[d] != 0 && end != shape[d])) return false;
  }
  return true;
}

bool HoldsNothing(const v1::ShardView& v) {
  for (int64_t e : v.extent()) {
    if (e == 0) return true;
  }
  return false;
}

const v1::TensorSpec* FindTensor(const v1::LayoutSpec& spec, const std::string& name) {
  for (const v1::TensorSpec& t : spec.tensors()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

// A destination tensor cast from its sources' F32 to BF16 (nearest even); no scales, any
// boxes. Its source_dtype stays empty when no source declares it (the planner says so).
absl::StatusOr<Recipe> CastRecipe(const v1::TensorSpec& t, const v1::LayoutSpec& sources,
                                  const std::string& what) {
  const v1::Quantization& q = t.quantization();
  if (t.dtype() != "BF16") {
    return Invalid(absl::StrCat(what, ": ", kCast, " rounds F32 to BF16, not to ", t.dtype()));
  }
  if (!q.scale_tensor().empty() || !q.block().empty()) {
    return Invalid(absl::StrCat(what, ": ", kCast, " takes no scale_tensor or block"));
  }
  Recipe recipe;
  recipe.scheme = kCast;
  recipe.shape = ShapeOf(t);
  const v1::TensorSpec* source = FindTensor(sources, t.name());
  if (source == nullptr) return recipe;
  recipe.source_dtype = source->dtype();
  recipe.derived = source->dtype() != t.dtype();
  if (recipe.derived && source->dtype() != "F32") {
    return Invalid(absl::StrCat(what, ": ", kCast, " rounds F32 to BF16, but the sources hold ",
                                source->dtype()));
  }
  return recipe;
}

// The recipes of the destinations' quantized tensors, checked against both sides.
absl::StatusOr<std::map<std::string, Recipe>> RecipesOf(const v1::LayoutSpec& destinations,
                                                        const v1::LayoutSpec& sources) {
  std::map<std::string, Recipe> recipes;
  std::map<std::string, std::string> weight_of_scale;
  for (const v1::TensorSpec& t : destinations.tensors()) {
    if (!t.has_quantization()) continue;
    const v1::Quantization& q = t.quantization();
    const std::string what = absl::StrCat("destination tensor \"", t.name(), "\"");
    if (q.scheme() == kCast) {
      absl::StatusOr<Recipe> cast = CastRecipe(t, sources, what);
      if (!cast.ok()) return cast.status();
      if (!cast->source_dtype.empty()) recipes.emplace(t.name(), *std::move(cast));
      continue;
    }
    if (q.scheme() != kBlockFp8 && q.scheme() != kDequantize) {
      return Invalid(absl::StrCat(what, ": quantization scheme \"", q.scheme(),
                                  "\" is not known (expected \"", kBlockFp8, "\", \"", kCast,
                                  "\" or \"", kDequantize, "\")"));
    }
    // Dequantized: the sources hold the codes and the scale tensor, the destination values.
    const bool dequantize = q.scheme() == kDequantize;
    if (dequantize && t.dtype() != "BF16" && t.dtype() != "F32") {
      return Invalid(
          absl::StrCat(what, ": ", kDequantize, " gives BF16 or F32 values, not ", t.dtype()));
    }
    if (!dequantize && t.dtype() != "F8_E4M3") {
      return Invalid(absl::StrCat(what, ": ", kBlockFp8, " holds F8_E4M3 codes, not ", t.dtype()));
    }
    Recipe recipe;
    recipe.scheme = q.scheme();
    recipe.shape = ShapeOf(t);
    recipe.block = BlockOf(q, recipe.shape);
    if (recipe.block.size() != recipe.shape.size()) {
      return Invalid(absl::StrCat(what, ": quantization block ", ShapeText(recipe.block), " has ",
                                  recipe.block.size(), " dims, the tensor ", recipe.shape.size()));
    }
    for (size_t d = 0; d < recipe.block.size(); ++d) {
      if (recipe.block[d] <= 0) {
        return Invalid(absl::StrCat(what, ": quantization block ", ShapeText(recipe.block),
                                    " has a dim that is not positive"));
      }
      if (d + 2 < recipe.block.size() && recipe.block[d] != 1) {
        return Invalid(absl::StrCat(what, ": quantization block ", ShapeText(recipe.block),
                                    " spans more than the last two dims (the others take 1)"));
      }
    }
    if (recipe.block.size() < 2) {
      return Invalid(absl::StrCat(what,
                                  ": quantization blocks span the last two of two or "
                                  "more dims; the tensor has ",
                                  recipe.block.size()));
    }
    if (!q.recipe().empty() && (dequantize || (q.recipe() != "deepgemm" && q.recipe() != "divide" &&
                                               q.recipe() != "pow2"))) {
      return Invalid(absl::StrCat(what, ": quantization recipe \"", q.recipe(), "\" is not ",
                                  dequantize ? "taken by dequantize (code * scale)"
                                             : "known (expected deepgemm, divide or pow2)"));
    }
    recipe.rule = q.recipe();
    recipe.scale_tensor = q.scale_tensor();
    if (recipe.scale_tensor.empty()) {
      return Invalid(absl::StrCat(what, ": its quantization names no scale_tensor"));
    }
    if (!weight_of_scale.emplace(recipe.scale_tensor, t.name()).second) {
      return Invalid(absl::StrCat(what, ": scale tensor \"", recipe.scale_tensor,
                                  "\" already holds the scales of \"",
                                  weight_of_scale[recipe.scale_tensor], "\""));
    }
    const v1::TensorSpec* scale =
        FindTensor(dequantize ? sources : destinations, recipe.scale_tensor);
    if (scale == nullptr) {
      return Invalid(absl::StrCat(what, ": its scale tensor \"", recipe.scale_tensor,
                                  "\" is not a ", dequantize ? "source" : "destination",
                                  " tensor"));
    }
    if (dequantize && FindTensor(destinations, recipe.scale_tensor) != nullptr) {
      return Invalid(absl::StrCat("destination tensor \"", recipe.scale_tensor,
                                  "\": the destinations receive it only to dequantize \"", t.name(),
                                  "\", so they may not declare it"));
    }
    Dims scale_shape = BlockGrid(recipe.shape, recipe.block);
    if (scale->dtype() != "F32" || ShapeOf(*scale) != scale_shape || scale->has_quantization()) {
      return Invalid(absl::StrCat(what, ": its scale tensor \"", recipe.scale_tensor, "\" is ",
                                  scale->dtype(), " ", ShapeText(ShapeOf(*scale)), "; blocks of ",
                                  BlockText(recipe.block), " need F32 ", ShapeText(scale_shape)));
    }
    const v1::TensorSpec* source = FindTensor(sources, t.name());
    if (source == nullptr) continue;  // the planner says no source holds it
    recipe.source_dtype = source->dtype();
    recipe.derived = source->dtype() != t.dtype();
    if (dequantize) {
      if (source->dtype() != "F8_E4M3") {
        return Invalid(absl::StrCat(what, ": ", kDequantize,
                                    " reads F8_E4M3 codes, but the sources hold ",
                                    source->dtype()));
      }
    } else if (recipe.derived) {
      if (source->dtype() != "BF16" && source->dtype() != "F32") {
        return Invalid(absl::StrCat(what, ": ", kBlockFp8,
                                    " quantizes BF16 or F32, but the sources hold ",
                                    source->dtype()));
      }
      if (FindTensor(sources, recipe.scale_tensor) != nullptr) {
        return Invalid(absl::StrCat("source tensor \"", recipe.scale_tensor,
                                    "\": the destinations derive it by quantizing \"", t.name(),
                                    "\", so the sources may not declare it"));
      }
    }
    recipes.emplace(t.name(), std::move(recipe));
  }
  return recipes;
}

// Every destination view of a quantized tensor is whole blocks, and its rank holds their
// scales.
absl::Status CheckDestinations(const v1::LayoutSpec& destinations,
                               const std::map<std::string, Recipe>& recipes) {
  for (const v1::RankLayout& rank : destinations.ranks()) {
    for (int v = 0; v < rank.views_size(); ++v) {
      auto recipe = recipes.find(rank.views(v).tensor());
      if (recipe == recipes.end() || recipe->second.scheme != kBlockFp8 ||
          HoldsNothing(rank.views(v))) {
        continue;
      }
      const Box box = BoxOfView(rank.views(v));
      if (box.rank() != recipe->second.shape.size()) continue;  // CompileLayout says why
      const std::string what =
          absl::StrCat("destination rank ", rank.rank(), ": view ", v, " of \"",
                       rank.views(v).tensor(), "\" holds ", FormatBox(box));
      if (!WholeBlocks(box, recipe->second.block, recipe->second.shape, /*tiled_only=*/true)) {
        return Invalid(
            absl::StrCat(what, ", which cuts its ", BlockText(recipe->second.block),
                         " quantization blocks (a view of a quantized tensor starts at "
                         "a block corner and ends at a block edge or the tensor's end, in "
                         "the dims its blocks tile)"));
      }
      const Box blocks = BlocksOf(box, recipe->second.block);
      bool scaled = false;
      for (const v1::ShardView& other : rank.views()) {
        scaled = scaled || (other.tensor() == recipe->second.scale_tensor &&
                            other.offset_size() == static_cast<int>(blocks.rank()) &&
                            Contains(BoxOfView(other), blocks));
      }
      if (!scaled) {
        return Invalid(absl::StrCat(what, ", but no view of \"", recipe->second.scale_tensor,
                                    "\" on the rank holds the scales of its blocks ",
                                    FormatBox(blocks)));
      }
    }
  }
  return absl::OkStatus();
}

// The entry of view `v` of `rank` that `recipe` quantizes (or casts, or dequantizes), its
// scales in view `scale_view` of the rank (-1: none).
v1::QuantizedSource EntryOf(int64_t rank, int v, const v1::ShardView& view, const Recipe& recipe,
                            int scale_view) {
  v1::QuantizedSource entry;
  entry.set_rank(rank);
  entry.set_view(v);
  entry.set_scale_view(scale_view);
  entry.set_tensor(view.tensor());
  entry.set_scale_tensor(recipe.scale_tensor);
  entry.set_source_dtype(recipe.source_dtype);
  entry.set_scheme(recipe.scheme);
  entry.set_recipe(recipe.rule);
  for (int64_t b : recipe.block) entry.add_block(b);
  *entry.mutable_offset() = view.offset();
  *entry.mutable_extent() = view.extent();
  return entry;
}

// Declares `recipe`'s scale tensor (F32, one scale per block) in `layout`.
void AddScaleTensor(const Recipe& recipe, v1::LayoutSpec* layout) {
  v1::TensorSpec* scale = layout->add_tensors();
  scale->set_name(recipe.scale_tensor);
  scale->set_dtype("F32");
  for (int64_t e : BlockGrid(recipe.shape, recipe.block)) scale->add_shape(e);
}

// The block-quantized tensors some source view of which cuts blocks: quantized on arrival.
std::set<std::string> CutBetweenSources(const v1::LayoutSpec& sources,
                                        const std::map<std::string, Recipe>& recipes) {
  std::set<std::string> cut;
  for (const v1::RankLayout& rank : sources.ranks()) {
    for (const v1::ShardView& view : rank.views()) {
      auto recipe = recipes.find(view.tensor());
      if (recipe == recipes.end() || !recipe->second.derived ||
          recipe->second.scheme != kBlockFp8) {
        continue;
      }
      const Box box = BoxOfView(view);
      if (box.rank() == recipe->second.shape.size() &&
          !WholeBlocks(box, recipe->second.block, recipe->second.shape)) {
        cut.insert(view.tensor());
      }
    }
  }
  return cut;
}

}  // namespace

bool QuantizesAny(const v1::LayoutSpec& destinations) {
  for (const v1::TensorSpec& t : destinations.tensors()) {
    if (t.has_quantization()) return true;
  }
  return false;
}

Dims BlockOf(const v1::Quantization& quantization, const Dims& shape) {
  if (!quantization.block().empty()) {
    return Dims(quantization.block().begin(), quantization.block().end());
  }
  Dims block(shape.size(), 1);
  for (size_t d = shape.size() >= 2 ? shape.size() - 2 : 0; d < shape.size(); ++d) block[d] = 128;
  return block;
}

absl::Status SendQuantized(const v1::LayoutSpec& destinations, v1::LayoutSpec* sources,
                           std::vector<v1::QuantizedSource>* quantized) {
  quantized->clear();
  if (!QuantizesAny(destinations)) return absl::OkStatus();
  absl::StatusOr<std::map<std::string, Recipe>> recipes = RecipesOf(destinations, *sources);
  if (!recipes.ok()) return recipes.status();
  if (absl::Status checked = CheckDestinations(destinations, *recipes); !checked.ok()) {
    return checked;
  }
  const std::set<std::string> cut = CutBetweenSources(*sources, *recipes);
  std::map<std::string, const Recipe*> derived;
  for (const auto& [name, recipe] : *recipes) {
    if (recipe.derived && recipe.scheme != kDequantize && !cut.count(name)) {
      derived[name] = &recipe;
    }
  }
  if (derived.empty()) return absl::OkStatus();
  const int declared = sources->tensors_size();
  for (int i = 0; i < declared; ++i) {
    v1::TensorSpec* t = sources->mutable_tensors(i);
    auto recipe = derived.find(t->name());
    if (recipe == derived.end()) continue;
    if (recipe->second->scheme == kCast) {
      t->set_dtype("BF16");
      continue;
    }
    t->set_dtype("F8_E4M3");
    AddScaleTensor(*recipe->second, sources);
  }
  for (v1::RankLayout& rank : *sources->mutable_ranks()) {
    const int views = rank.views_size();
    for (int v = 0; v < views; ++v) {
      const v1::ShardView& view = rank.views(v);
      auto found = derived.find(view.tensor());
      if (found == derived.end() || HoldsNothing(view)) continue;
      const Recipe& recipe = *found->second;
      const Box box = BoxOfView(view);
      if (box.rank() != recipe.shape.size()) continue;  // CompileLayout says why
      if (recipe.scheme == kCast) {
        quantized->push_back(EntryOf(rank.rank(), v, view, recipe, /*scale_view=*/-1));
        continue;
      }
      const Box blocks = BlocksOf(box, recipe.block);
      quantized->push_back(EntryOf(rank.rank(), v, view, recipe, rank.views_size()));
      v1::ShardView* scales = rank.add_views();  // `view` may move: read above
      scales->set_tensor(recipe.scale_tensor);
      for (int64_t o : blocks.offset) scales->add_offset(o);
      for (int64_t e : blocks.extent) scales->add_extent(e);
    }
  }
  return absl::OkStatus();
}

absl::Status ReceiveQuantized(v1::LayoutSpec* sources, v1::LayoutSpec* destinations,
                              std::vector<v1::QuantizedSource>* received) {
  received->clear();
  if (!QuantizesAny(*destinations)) return absl::OkStatus();
  absl::StatusOr<std::map<std::string, Recipe>> recipes = RecipesOf(*destinations, *sources);
  if (!recipes.ok()) return recipes.status();
  // What SendQuantized left in the sources' dtype (blocks cut between source ranks), and
  // what the destinations dequantize.
  std::map<std::string, const Recipe*> arriving;
  std::set<std::string> scale_tensors;  // of the weights quantized on arrival
  for (const auto& [name, recipe] : *recipes) {
    if (!recipe.derived || recipe.scheme == kCast) continue;
    arriving[name] = &recipe;
    if (recipe.scheme == kBlockFp8) scale_tensors.insert(recipe.scale_tensor);
  }
  if (arriving.empty()) return absl::OkStatus();
  const int declared = destinations->tensors_size();
  for (int i = 0; i < declared; ++i) {
    v1::TensorSpec& t = *destinations->mutable_tensors(i);
    auto found = arriving.find(t.name());
    if (found == arriving.end()) continue;
    const Recipe& recipe = *found->second;
    t.set_dtype(recipe.source_dtype);
    t.clear_quantization();
    // Quantized on arrival: the sources declare the scale tensor with no views, as the
    // destinations receive none of it. Dequantized: the destinations receive the sources'.
    AddScaleTensor(recipe, recipe.scheme == kDequantize ? destinations : sources);
  }
  for (v1::RankLayout& rank : *destinations->mutable_ranks()) {
    const int views = rank.views_size();
    for (int v = 0; v < views; ++v) {
      const v1::ShardView& view = rank.views(v);
      auto found = arriving.find(view.tensor());
      if (found == arriving.end() || HoldsNothing(view)) continue;
      const Recipe& recipe = *found->second;
      const Box box = BoxOfView(view);
      if (box.rank() != recipe.shape.size()) continue;  // CompileLayout says why
      const bool dequantize = recipe.scheme == kDequantize;
      if (rank.bucketed()) {
        return Invalid(absl::StrCat(
            "destination rank ", rank.rank(), ": view ", v, " of \"", view.tensor(), "\": ",
            dequantize ? "it is dequantized on arrival"
                       : "its blocks are cut between source ranks, so they are quantized on "
                         "arrival",
            ", which needs the rank's memory; a bucketed rank has none on its daemon"));
      }
      if (!dequantize && !WholeBlocks(box, recipe.block, recipe.shape)) {
        return Invalid(absl::StrCat(
            "destination rank ", rank.rank(), ": view ", v, " of \"", view.tensor(), "\" holds ",
            FormatBox(box), ", which cuts its ", BlockText(recipe.block),
            " quantization blocks, and source ranks cut them too: no rank holds such a block "
            "whole to quantize it"));
      }
      const Box blocks = BlocksOf(box, recipe.block);
      int scale_view = -1;
      if (dequantize) {  // the scales of its blocks, received beside the codes
        scale_view = rank.views_size();
        v1::ShardView* scales = rank.add_views();
        scales->set_tensor(recipe.scale_tensor);
        for (int64_t o : blocks.offset) scales->add_offset(o);
        for (int64_t e : blocks.extent) scales->add_extent(e);
      }
      for (int s = 0; s < views && scale_view < 0; ++s) {  // CheckDestinations found one
        const v1::ShardView& other = rank.views(s);
        if (other.tensor() == recipe.scale_tensor &&
            other.offset_size() == static_cast<int>(blocks.rank()) &&
            Contains(BoxOfView(other), blocks)) {
          scale_view = s;
        }
      }
      received->push_back(EntryOf(rank.rank(), v, view, recipe, scale_view));
      // Another dtype now: the daemon keeps it as its own dense buffer.
      v1::ShardView* moved = rank.mutable_views(v);
      moved->clear_buffer();
      moved->clear_byte_offset();
      moved->clear_strides();
    }
    for (v1::ShardView& view : *rank.mutable_views()) {
      if (!scale_tensors.count(view.tensor())) continue;
      for (int64_t& e : *view.mutable_extent()) e = 0;  // the daemon writes it, not the plan
    }
  }
  return absl::OkStatus();
}

void QuantizeLinearWeights(v1::LayoutSpec* destinations) {
  std::map<std::string, std::pair<std::string, Dims>> scale_of;  // weight -> scale, block
  const int declared = destinations->tensors_size();
  for (int i = 0; i < declared; ++i) {
    v1::TensorSpec* t = destinations->mutable_tensors(i);
    const std::string name = t->name();
    if (t->shape_size() < 2 || !absl::StartsWith(name, "model.layers.") ||
        absl::EndsWith(name, "mlp.gate.weight") || t->has_quantization()) {
      continue;
    }
    const std::string scale_name = absl::StrCat(name, "_scale_inv");
    t->set_dtype("F8_E4M3");
    v1::Quantization* q = t->mutable_quantization();
    q->set_scheme(kBlockFp8);
    q->set_scale_tensor(scale_name);
    const Dims shape = ShapeOf(*t);
    const Dims block = BlockOf(*q, shape);
    v1::TensorSpec* scale = destinations->add_tensors();
    scale->set_name(scale_name);
    scale->set_dtype("F32");
    for (int64_t e : BlockGrid(shape, block)) scale->add_shape(e);
    scale_of[name] = {scale_name, block};
  }
  for (v1::RankLayout& rank : *destinations->mutable_ranks()) {
    const int views = rank.views_size();
    for (int v = 0; v < views; ++v) {
      auto found = scale_of.find(rank.views(v).tensor());
      if (found == scale_of.end() || HoldsNothing(rank.views(v))) continue;
      const Box blocks = BlocksOf(BoxOfView(rank.views(v)), found->second.second);
      v1::ShardView* scales = rank.add_views();
      scales->set_tensor(found->second.first);
      for (int64_t o : blocks.offset) scales->add_offset(o);
      for (int64_t e : blocks.extent) scales->add_extent(e);
    }
  }
}

v1::LayoutSpec WithoutQuantization(const v1::LayoutSpec& destinations,
                                   const v1::LayoutSpec& sources) {
  v1::LayoutSpec plain;
  std::map<std::string, std::string> source_dtype;
  for (const v1::TensorSpec& t : sources.tensors()) source_dtype[t.name()] = t.dtype();
  std::map<std::string, bool> scale_tensors, retyped;
  for (const v1::TensorSpec& t : destinations.tensors()) {
    auto dtype = source_dtype.find(t.name());
    if (t.has_quantization() && t.quantization().scheme() != kDequantize &&
        dtype != source_dtype.end() && dtype->second != t.dtype()) {
      retyped[t.name()] = true;
      if (t.quantization().scheme() == kBlockFp8) {
        scale_tensors[t.quantization().scale_tensor()] = true;
      }
    }
  }
  for (const v1::TensorSpec& t : destinations.tensors()) {
    if (scale_tensors.count(t.name())) continue;
    v1::TensorSpec* copy = plain.add_tensors();
    *copy = t;
    if (retyped.count(t.name())) {
      copy->set_dtype(source_dtype[t.name()]);
      copy->clear_quantization();
    }
  }
  for (const v1::RankLayout& rank : destinations.ranks()) {
    v1::RankLayout* copy = plain.add_ranks();
    *copy = rank;
    copy->clear_views();
    for (const v1::ShardView& view : rank.views()) {
      if (scale_tensors.count(view.tensor())) continue;
      v1::ShardView* kept = copy->add_views();
      *kept = view;
      if (retyped.count(view.tensor())) {  // wider now: its own dense buffer
        kept->clear_buffer();
        kept->clear_byte_offset();
        kept->clear_strides();
      }
    }
  }
  return plain;
}

}  // namespace refit::planner
