#include "core/error_fields.hpp"

namespace tccl {

void putErrorFields(const ErrorInfo& i, std::map<std::string, std::string>& out) {
  out["kind"] = std::string(toString(i.kind));
  out["culprit"] = std::to_string(i.culprit);
  out["culprit_address"] = i.culpritAddress;
  out["detected_by"] = std::to_string(i.detectedBy);
  out["rank_field"] = std::to_string(i.rank);
  out["peer"] = std::to_string(i.peer);
  out["collective"] = i.collective;
  out["seq"] = std::to_string(i.seq);
  out["algorithm"] = i.algorithm;
  out["phase"] = i.phase;
  out["step"] = std::to_string(i.step);
  out["steps"] = std::to_string(i.steps);
  out["bytes_moved"] = std::to_string(i.bytesMoved);
  out["bytes_expected"] = std::to_string(i.bytesExpected);
  out["info_elapsed_ms"] = std::to_string(i.elapsedMs);
  out["timeout_ms"] = std::to_string(i.timeoutMs);
  out["local_sig"] = i.localSignature;
  out["remote_sig"] = i.remoteSignature;
}

}  // namespace tccl
