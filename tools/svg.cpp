#include "svg.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli.hpp"

namespace tccl::cli {

std::string xmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}
}  // namespace

Svg::Svg(int width, int height) : width_(width), height_(height) {}

void Svg::rect(double x, double y, double w, double h, const std::string& fill,
               const std::string& title) {
  body_ += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" +
           num(h) + "\" fill=\"" + fill + "\">";
  if (!title.empty()) body_ += "<title>" + xmlEscape(title) + "</title>";
  body_ += "</rect>\n";
}

void Svg::line(double x1, double y1, double x2, double y2, const std::string& stroke,
               double width) {
  body_ += "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" +
           num(y2) + "\" stroke=\"" + stroke + "\" stroke-width=\"" + num(width) + "\"/>\n";
}

void Svg::polyline(const std::vector<std::pair<double, double>>& pts, const std::string& stroke,
                   double width) {
  body_ += "<polyline fill=\"none\" stroke=\"" + stroke + "\" stroke-width=\"" + num(width) +
           "\" points=\"";
  for (const auto& [x, y] : pts) body_ += num(x) + "," + num(y) + " ";
  body_ += "\"/>\n";
}

void Svg::circle(double x, double y, double r, const std::string& fill) {
  body_ += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"" + num(r) + "\" fill=\"" +
           fill + "\"/>\n";
}

void Svg::text(double x, double y, const std::string& s, int size, const std::string& anchor,
               double rotate) {
  body_ += "<text x=\"" + num(x) + "\" y=\"" + num(y) +
           "\" font-family=\"sans-serif\" font-size=\"" + std::to_string(size) +
           "\" text-anchor=\"" + anchor + "\"";
  if (rotate != 0)
    body_ += " transform=\"rotate(" + num(rotate) + " " + num(x) + " " + num(y) + ")\"";
  body_ += ">" + xmlEscape(s) + "</text>\n";
}

std::string Svg::str() const {
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width_ << "\" height=\"" << height_
     << "\" viewBox=\"0 0 " << width_ << " " << height_ << "\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << body_ << "</svg>\n";
  return os.str();
}

void Svg::save(const std::string& path) const {
  std::ofstream f(path);
  if (!f) throw UsageError{"cannot write " + path};
  f << str();
  if (!f) throw UsageError{"cannot write " + path};
}

}  // namespace tccl::cli
