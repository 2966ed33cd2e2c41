#include "client/plan_svg.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "planner/link_loads.h"
#include "planner/topology.h"

namespace refit::client {
namespace {

constexpr double kMatrixSize = 560;  // pixels across the matrix
constexpr double kChartWidth = 560;
constexpr double kChartHeight = 260;
constexpr double kMargin = 70;
constexpr int32_t kMaxCells = 64;  // matrix cells a side

// White (nothing) through light blue to dark blue (the busiest pair), on a square-root
// scale: a log scale makes every busy pair look alike.
std::string CellColour(int64_t bytes, int64_t max_bytes) {
  if (bytes <= 0) return "#ffffff";
  const double t = std::sqrt(static_cast<double>(bytes) / std::max<int64_t>(max_bytes, 1));
  const int r = static_cast<int>(222 - t * 214), g = static_cast<int>(235 - t * 187),
            b = static_cast<int>(247 - t * 140);
  return absl::StrFormat("#%02x%02x%02x", r, g, b);
}

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '&') {
      out += "&amp;";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Text(double x, double y, const std::string& text, const std::string& extra = "") {
  return absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\"%s>%s</text>\n", x, y, extra, Escape(text));
}

// Boundaries between NVLink domains along a list of ranks (the index where a new one starts).
std::vector<int32_t> DomainStarts(const std::vector<int32_t>& domains) {
  std::vector<int32_t> starts;
  for (size_t i = 1; i < domains.size(); ++i) {
    if (domains[i] != domains[i - 1]) starts.push_back(i);
  }
  return starts;
}

// "source rank 3", or "source ranks 8..15" for a bin.
std::string BinName(const std::string& side, const planner::Layout& layout, int32_t bin,
                    int32_t bins) {
  const int64_t n = layout.ranks.size();
  const int64_t first = (bin * n + bins - 1) / bins, last = ((bin + 1) * n + bins - 1) / bins - 1;
  if (first == last) return absl::StrCat(side, " rank ", layout.ranks[first].rank);
  return absl::StrCat(side, " ranks ", layout.ranks[first].rank, "..", layout.ranks[last].rank);
}

}  // namespace

std::string PlanSvg(const PlanSummary& summary, const v1::Topology& topology) {
  const planner::Plan& plan = *summary.plan;
  const planner::Layout& sources = *summary.sources;
  const planner::Layout& destinations = *summary.destinations;
  const planner::ClusterMap cluster(topology, sources, destinations);
  const int32_t num_sources = sources.ranks.size(), num_destinations = destinations.ranks.size();
  // Large groups are drawn in bins of consecutive ranks, at most kMaxCells a side.
  const int32_t rows = std::min(num_sources, kMaxCells);
  const int32_t cols = std::min(num_destinations, kMaxCells);
  auto row_of = [&](int32_t rank) {
    return static_cast<int32_t>(static_cast<int64_t>(rank) * rows / num_sources);
  };
  auto col_of = [&](int32_t rank) {
    return static_cast<int32_t>(static_cast<int64_t>(rank) * cols / num_destinations);
  };

  // Bytes per (source bin, destination bin); bytes forwarded between destinations.
  std::vector<int64_t> matrix(static_cast<size_t>(rows) * cols, 0);
  int64_t forwarded = 0;
  planner::LinkLoads loads(cluster.num_gpus());
  for (const planner::Transfer& t : plan.transfers) {
    loads.Add(t.route, cluster.EndpointGpu(t.src), cluster.EndpointGpu(t.dst), plan.BytesOf(t));
    if (t.src.IsSourceSide() && !t.dst.IsSourceSide()) {
      matrix[static_cast<size_t>(row_of(t.src.rank_index)) * cols + col_of(t.dst.rank_index)] +=
          plan.BytesOf(t);
    } else {
      forwarded += plan.BytesOf(t);
    }
  }
  const int64_t max_cell = *std::max_element(matrix.begin(), matrix.end());

  std::string svg;
  const double width = kMargin * 3 + kMatrixSize + kChartWidth;
  const double height = kMargin + kMatrixSize + 50;
  absl::StrAppendFormat(&svg,
                        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
                        "height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
                        width, height);
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += Text(
      kMargin, 24,
      absl::StrCat(plan.strategy, ": ", HumanBytes(plan.stats.total_bytes), " in ",
                   plan.transfers.size(), " transfers, ", plan.num_batches, " batches; predicted ",
                   absl::StrFormat("%.3f", plan.stats.predicted_seconds), " s, lower bound ",
                   absl::StrFormat("%.3f", plan.stats.lower_bound_seconds), " s"),
      " font-size=\"15\" font-weight=\"bold\"");

  // The matrix.
  const double cell_w = kMatrixSize / cols, cell_h = kMatrixSize / rows;
  const double mx = kMargin, my = kMargin;
  svg += "<g id=\"transfer-matrix\">\n";
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t c = 0; c < cols; ++c) {
      const int64_t bytes = matrix[static_cast<size_t>(r) * cols + c];
      if (bytes == 0) continue;
      absl::StrAppendFormat(
          &svg,
          "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\">"
          "<title>%s to %s: %s</title></rect>\n",
          mx + c * cell_w, my + r * cell_h, cell_w, cell_h, CellColour(bytes, max_cell),
          BinName("source", sources, r, rows), BinName("destination", destinations, c, cols),
          HumanBytes(bytes));
    }
  }
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                        "fill=\"none\" stroke=\"#444\"/>\n",
                        mx, my, kMatrixSize, kMatrixSize);
  // A domain boundary is drawn where the bin of a rank whose domain differs from the
  // previous rank's starts.
  std::vector<int32_t> source_domains, destination_domains;
  for (int32_t r = 0; r < num_sources; ++r) {
    source_domains.push_back(cluster.DomainOf(cluster.SourceGpu(r)));
  }
  for (int32_t c = 0; c < num_destinations; ++c) {
    destination_domains.push_back(cluster.DomainOf(cluster.DestinationGpu(c)));
  }
  std::vector<int32_t> row_lines, col_lines;
  for (int32_t r : DomainStarts(source_domains)) row_lines.push_back(row_of(r));
  for (int32_t c : DomainStarts(destination_domains)) col_lines.push_back(col_of(c));
  row_lines.erase(std::unique(row_lines.begin(), row_lines.end()), row_lines.end());
  col_lines.erase(std::unique(col_lines.begin(), col_lines.end()), col_lines.end());
  // Dense boundaries are drawn thinner, so they do not hide the cells.
  const double line_width =
      std::min(kMatrixSize / (row_lines.size() + 1), kMatrixSize / (col_lines.size() + 1)) < 20
          ? 0.4
          : 1.0;
  for (int32_t r : row_lines) {
    absl::StrAppendFormat(&svg,
                          "<line class=\"domain\" x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" "
                          "y2=\"%.2f\" stroke=\"#d62728\" stroke-width=\"%.1f\"/>\n",
                          mx, my + r * cell_h, mx + kMatrixSize, my + r * cell_h, line_width);
  }
  for (int32_t c : col_lines) {
    absl::StrAppendFormat(&svg,
                          "<line class=\"domain\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" "
                          "y2=\"%.1f\" stroke=\"#d62728\" stroke-width=\"%.1f\"/>\n",
                          mx + c * cell_w, my, mx + c * cell_w, my + kMatrixSize, line_width);
  }
  svg += "</g>\n";
  svg += Text(
      mx, my - 8,
      absl::StrCat("destination ranks 0..", num_destinations - 1,
                   num_destinations > cols ? absl::StrCat(" in ", cols, " bins") : std::string(),
                   " \u2192 (red lines: NVLink domains)"));
  svg += Text(mx - 12, my + kMatrixSize / 2,
              absl::StrCat("source ranks 0..", num_sources - 1,
                           num_sources > rows ? absl::StrCat(" in ", rows, " bins") : std::string(),
                           " \u2193"),
              absl::StrFormat(" transform=\"rotate(-90 %.1f %.1f)\" text-anchor=\"middle\"",
                              mx - 12, my + kMatrixSize / 2));
  svg += Text(mx, my + kMatrixSize + 20,
              absl::StrCat("darkest cell ", HumanBytes(max_cell), " (square-root scale); ",
                           HumanBytes(forwarded), " forwarded between destinations"));

  // Busiest link per GPU, in seconds, against the lower bound.
  const planner::Bandwidths& bandwidths = cluster.bandwidths();
  const int32_t gpus = cluster.num_gpus();
  std::vector<double> seconds(gpus, 0);
  std::vector<int> kind(gpus, planner::kNicIn);
  for (int32_t g = 0; g < gpus; ++g) {
    for (int k = 0; k < planner::kNumLinkKinds; ++k) {
      const double s = loads.At(g, static_cast<planner::LinkKind>(k)) /
                       planner::LinkBandwidth(static_cast<planner::LinkKind>(k), bandwidths);
      if (s > seconds[g]) {
        seconds[g] = s;
        kind[g] = k;
      }
    }
  }
  const double busiest = *std::max_element(seconds.begin(), seconds.end());
  const double bound = plan.stats.lower_bound_seconds;
  const double top = std::max({busiest, bound, 1e-9}) * 1.1;
  const double cx = kMargin * 2 + kMatrixSize, cy = kMargin + 40;
  const char* kColours[] = {"#1f77b4", "#aec7e8", "#2ca02c", "#98df8a", "#7f7f7f"};
  const char* kNames[] = {"NIC out", "NIC in", "NVLink out", "NVLink in", "local copy"};
  svg += "<g id=\"link-loads\">\n";
  const double bar_w = kChartWidth / gpus;
  for (int32_t g = 0; g < gpus; ++g) {
    const double h = seconds[g] / top * kChartHeight;
    if (h <= 0) continue;
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
                          "fill=\"%s\"><title>GPU %d: %s %.4f s</title></rect>\n",
                          cx + g * bar_w, cy + kChartHeight - h, std::max(bar_w, 0.5), h,
                          kColours[kind[g]], g, kNames[kind[g]], seconds[g]);
  }
  absl::StrAppendFormat(&svg,
                        "<line id=\"lower-bound\" x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" "
                        "stroke=\"#d62728\" stroke-dasharray=\"6 3\"/>\n",
                        cx, cy + kChartHeight - bound / top * kChartHeight, cx + kChartWidth,
                        cy + kChartHeight - bound / top * kChartHeight);
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                        "fill=\"none\" stroke=\"#444\"/>\n",
                        cx, cy, kChartWidth, kChartHeight);
  svg += "</g>\n";
  svg += Text(cx, cy - 26, "busiest link of each GPU (seconds at the topology's bandwidths)",
              " font-weight=\"bold\"");
  svg += Text(cx, cy - 10,
              absl::StrFormat("busiest %.4f s; dashed: lower bound %.4f s (%.2fx)", busiest, bound,
                              bound > 0 ? busiest / bound : 0.0));
  svg += Text(cx, cy + kChartHeight + 16, absl::StrCat("GPUs 0..", gpus - 1));
  for (int k = 0; k < planner::kNumLinkKinds; ++k) {
    const double lx = cx + k * 110, ly = cy + kChartHeight + 36;
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" "
                          "fill=\"%s\"/>\n",
                          lx, ly - 9, kColours[k]);
    svg += Text(lx + 14, ly, kNames[k]);
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace refit::client
