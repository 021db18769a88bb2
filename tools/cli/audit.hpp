// ptread (the tool) — `ptread audit`: the globals torch.load would import.
#pragma once

#include "output.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace ptread_cli {

inline int audit(const ptread::Checkpoint& ck, bool json) {
  const ptread::AuditReport r = ptread::audit(ck);
  std::string out;
  if (json) {
    out += "{\n  \"format\": ";
    append_json_string(out, r.format);
    out += ",\n  \"globals\": [";
    for (size_t k = 0; k < r.globals.size(); ++k) {
      const auto& g = r.globals[k];
      out += k ? ",\n    {\"module\": " : "\n    {\"module\": ";
      append_json_string(out, g.module);
      out += ", \"name\": ";
      append_json_string(out, g.name);
      out += ", \"count\": " + std::to_string(g.count);
      out += g.allowed ? ", \"weights_only\": \"allowed\"}" : ", \"weights_only\": \"refused\"}";
    }
    out += r.globals.empty() ? "],\n" : "\n  ],\n";
    out += "  \"refused\": " + std::to_string(r.refused()) + "\n}\n";
  } else {
    size_t w = 6;
    std::vector<std::string> names;
    for (const auto& g : r.globals) {
      names.push_back(display(g.module + "." + g.name));
      w = std::max(w, columns(names.back()));
    }
    out += "GLOBAL";
    pad_to(out, 6, w + 2);
    out += "COUNT  torch.load(weights_only=True)\n";
    for (size_t k = 0; k < r.globals.size(); ++k) {
      out += names[k];
      pad_to(out, columns(names[k]), w + 2);
      const std::string c = std::to_string(r.globals[k].count);
      pad_to(out, c.size(), 5);
      out += c;
      out += r.globals[k].allowed ? "  allowed\n" : "  REFUSED\n";
    }
    out += std::to_string(r.globals.size()) + (r.globals.size() == 1 ? " global" : " globals") + ", format " + r.format;
    if (r.refused() == 0) {
      out += ": nothing torch.load(weights_only=True) would refuse\n";
    } else {
      out += ": " + std::to_string(r.refused()) +
             " refused by torch.load(weights_only=True); torch.load(weights_only=False) would import them and may call "
             "them (ptread never does)\n";
    }
  }
  const int written = finish_stdout(out);
  if (written != kExitOk) return written;
  return r.refused() ? kExitUnsafe : kExitOk;
}

}  // namespace ptread_cli
