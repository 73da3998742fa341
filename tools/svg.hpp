// A minimal SVG writer for the CLI's plots: axes, bars, polylines, text. Writing SVG
// by hand keeps the tool free of plotting dependencies; any browser renders it.
#pragma once

#include <string>
#include <vector>

namespace tccl::cli {

class Svg {
 public:
  Svg(int width, int height);
  void rect(double x, double y, double w, double h, const std::string& fill,
            const std::string& title = "");
  void line(double x1, double y1, double x2, double y2, const std::string& stroke,
            double width = 1);
  void polyline(const std::vector<std::pair<double, double>>& pts, const std::string& stroke,
                double width = 2);
  void circle(double x, double y, double r, const std::string& fill);
  // anchor: "start", "middle" or "end".
  void text(double x, double y, const std::string& s, int size = 12,
            const std::string& anchor = "start", double rotate = 0);
  std::string str() const;
  // Writes the document; throws cli::UsageError naming the path if it cannot.
  void save(const std::string& path) const;

 private:
  int width_;
  int height_;
  std::string body_;
};

// Escapes &, <, > and quotes for SVG text and attributes.
std::string xmlEscape(const std::string& s);

}  // namespace tccl::cli
